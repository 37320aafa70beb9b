"""`--import MODULE|FILE.py` (issue 25, part 2): a team's module imported
before the model loads. A `.keras` file with a registered custom layer loads
with it and exports and passes parity; without it, Keras' many-line "Could not
locate class" is one line naming the class and the flag, even beside the
module's file (nothing in the model picks what is imported); bad items are
one-line usage errors; a module's op specs are registered."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")


from conftest import run_cli  # noqa: E402

PACKAGE = "bridge_test_acme"
LAYER = f'''
import keras

@keras.saving.register_keras_serializable(package="{PACKAGE}")
class ScaledResidual(keras.layers.Layer):
    def __init__(self, scale=0.5, **kw):
        super().__init__(**kw)
        self.scale = scale

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="random_normal")

    def call(self, x):
        return x + self.scale * x * self.w

    def get_config(self):
        return dict(super().get_config(), scale=self.scale)
'''


@pytest.fixture(scope="module")
def acme(tmp_path_factory):
    """(folder, the layer's module file, a .keras file using the layer), the
    layer then unregistered again, as in a fresh process."""
    folder = tmp_path_factory.mktemp("acme")
    module_file = folder / "acme_layers.py"
    module_file.write_text(LAYER)
    spec = importlib.util.spec_from_file_location("acme_layers_for_saving", module_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    keras.utils.set_random_seed(7)
    x = keras.Input((6,), name="x")
    y = keras.layers.Dense(2, name="y")(mod.ScaledResidual(0.25)(keras.layers.Dense(6)(x)))
    path = folder / "acme.keras"
    keras.Model(x, y).save(path)
    yield folder, module_file, path


@pytest.fixture
def unregistered(monkeypatch):
    """Keras' registry without the test's class (a fresh process's), restored after."""
    objects = keras.saving.get_custom_objects()
    for key in [k for k in objects if k.startswith(PACKAGE + ">")]:
        monkeypatch.delitem(objects, key)


def test_a_missing_class_is_one_line_naming_it_and_the_flag(capsys, monkeypatch, acme, unregistered):
    folder, _, path = acme
    monkeypatch.chdir(folder)  # the module's file is right there: nothing from the model imports it
    monkeypatch.syspath_prepend(str(folder))
    rc, out, err = run_cli(capsys, "export", str(path), "--to", "onnx", "-o", str(folder / "a.onnx"))
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.startswith("bridge export: error")]
    assert lines == [f"bridge export: error: cannot load the Keras file {path}: it uses the class 'ScaledResidual' "
                     f"(registered as '{PACKAGE}>ScaledResidual'), which no imported module registers: give the "
                     f"module that defines it with --import MODULE|FILE.py"], err[-2000:]
    assert "Traceback" not in err and "Full object config" not in err
    assert "acme_layers" not in sys.modules and not (folder / "a.onnx").exists()


def test_import_of_a_file_lets_it_export(tmp_path, capsys, acme, unregistered):
    _, module_file, path = acme
    rc, out, err = run_cli(capsys, "export", str(path), "--to", "onnx", "-o", str(tmp_path / "a.onnx"),
                        "--import", str(module_file), "--json")
    assert rc == 0, err[-2000:]
    checks = json.loads(out)["checks"]
    assert [c["output"] for c in checks] == ["y"] and all(c["passed"] for c in checks)
    # the export against the layer written out in numpy, on the Keras weights (an independent reference)
    import onnxruntime as ort
    from bridge import modelsource
    model = modelsource.resolve(str(path)).model
    d1, sr, d2 = [l for l in model.layers if l.weights]
    x = np.random.default_rng(3).uniform(-1, 1, (4, 6)).astype(np.float32)
    h = x.astype(np.float64) @ d1.kernel.numpy() + d1.bias.numpy()
    h = h + 0.25 * h * sr.w.numpy()
    ref = h @ d2.kernel.numpy() + d2.bias.numpy()
    got = ort.InferenceSession(str(tmp_path / "a.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_import_of_a_module_name_on_parity(capsys, monkeypatch, acme, unregistered):
    folder, _, path = acme
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "acme_layers", raising=False)
    rc, out, err = run_cli(capsys, "parity", str(path), "--runtimes", "ort,tflite", "--import", "acme_layers")
    assert rc == 0, (out + err)[-3000:]
    assert "PASS" in out


@pytest.mark.parametrize("item, words", [
    ("no_such_module_here", "--import no_such_module_here: no module 'no_such_module_here' is importable here"),
    ("missing/acme.py", "--import missing/acme.py: no such file"),
    ("bad name!", "--import 'bad name!': expected a module name"),
    ("BROKEN", "importing it failed: ZeroDivisionError: division by zero"),
    ("notpython.txt/", "a file to import must be a Python source file"),
])
def test_bad_imports_are_one_line_usage_errors(tmp_path, capsys, item, words):
    if item == "BROKEN":
        item = str(tmp_path / "broken.py")
        Path(item).write_text("x = 1 / 0\n")
    rc, out, err = run_cli(capsys, "ops", "--import", item)
    assert rc == 2 and words in err and "Traceback" not in err, err


def test_import_registers_a_modules_op_specs():
    """A module with SPEC is registered as an --op-spec file is (and taken out
    again: the registry is the process's)."""
    from bridge.ops import registry
    from bridge.team_imports import import_modules
    spec = Path(__file__).resolve().parents[1] / "examples" / "custom_op" / "fused_bias_gelu.py"
    before = dict(registry.SPECS), dict(registry.ORIGINS)
    try:
        import_modules([str(spec)])
        assert "FusedBiasGelu" in registry.SPECS and "FusedBiasGelu" not in before[0]
        assert registry.ORIGINS["FusedBiasGelu"] == f"--import {spec}"
    finally:
        for table, old in zip((registry.SPECS, registry.ORIGINS), before):
            table.clear()
            table.update(old)
