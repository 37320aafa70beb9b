"""Strings from a model never escape (issue 13): names made of every shell
metacharacter, `../`, absolute paths, NUL, newlines, very long and non-ASCII
names go through `bridge export X.onnx --to ge`; each either is refused with a
message naming it, or gives a bundle whose scripts (run with stand-in atc,
cmake, msame and bridge in a temporary folder) pass the name verbatim, and
nothing is written outside the output folder. Plus the reading side: external
data, --load-outputs folders, SavedModel folders, .keras archives."""
from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge import untrusted
from bridge.ascend import opp
from bridge.ascend.atc_names import carried
from bridge.cli import main

SEED = 13
METACHARS = "$`\\\"'!#&*()[]{}|;<>?~ \t=%^,:+@-"
ATOMS = list(METACHARS) + ["../", "/", "..", "\n", "\r", "\0", "ü", "名", "\u202e", "\u2028", "e\u0301", "a", "Z", "0"]


def _fixed(canary):
    return [
        f"x$(touch {canary}/a)`touch {canary}/b`",       # the issue's finding 1
        f"x$(touch${{IFS}}{canary}/c)",                  # the same without a space: passed verbatim
        f"x`touch${{IFS}}{canary}/d`", "x;touch${IFS}e", "x|id", "x&&id", "x>f", "x<f", "$HOME", "${IFS}", "~",
        "*", "?", "!!", "#x", "x\\", "'", '"', "'\\''", "-rf", "--input_shape=x", "a`b", "``", "a|b",
        "../../escaped_input", "../" * 12 + "etc/evil", f"{canary}/abs", "/", ".", "..", "input:0", "a,b",
        "a\0b", "a\nb", "a\r\n\nb", "x" * 5000, "名前ü", "\u202eevil", "a\u2028b", "file", "allow_pickle", "",
    ]


def _random(rng, n):
    return ["".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 12))) for _ in range(n)]


def _model(path, inp, out, node):
    g = helper.make_graph([helper.make_node("Relu", [inp], [out], name=node)], "evil",
                          [helper.make_tensor_value_info(inp, TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


STAND_IN = '#!/usr/bin/env bash\nprintf "%s\\0" "$@" >> "$LOGS/$(basename "$0").args"\n'
# cmake --install lays out PREFIX/vendors/<vendor>, which install.sh then configures
CMAKE = STAND_IN + 'if [[ "$1" == --install ]]; then mkdir -p "$4/vendors/bridge"; fi\n'


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """Stand-in executables that record their argv (NUL-separated) and a fake CANN."""
    root = tmp_path_factory.mktemp("bench")
    for tool in ("atc", "cmake", "msame", "bridge", "touch", "id"):
        (root / "bin").mkdir(exist_ok=True)
        (root / "bin" / tool).write_text(CMAKE if tool == "cmake" else STAND_IN)
        (root / "bin" / tool).chmod(0o755)
    (root / "cann" / "include").mkdir(parents=True)
    return root


def _run(script, cwd, bench, logs, *args):
    env = {"PATH": f"{bench}/bin:/usr/bin:/bin", "HOME": str(cwd), "LOGS": str(logs),
           "ASCEND_HOME_PATH": str(bench / "cann")}
    return subprocess.run(["bash", script, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=30)


def _argv(logs, tool):
    return (logs / f"{tool}.args").read_bytes().decode().split("\0")[:-1]


def _tree(folder):
    return sorted(os.path.relpath(os.path.join(r, f), folder) for r, ds, fs in os.walk(folder) for f in fs + ds)


def _check_bundle(out, case, bench, name, model_path):
    # every written file is a regular file (no link) under out
    real = os.path.realpath(out)
    for rel in _tree(out):
        full = os.path.join(out, rel)
        assert not os.path.islink(full) and os.path.realpath(full).startswith(real + os.sep), rel
    # C++, CMake and install.sh carry no model string: the package is bridge's own, byte for byte
    for rel, text in opp.package_files().items():
        assert open(os.path.join(out, "opp", rel), encoding="utf-8").read() == text, rel
    names = json.load(open(os.path.join(out, "names.json")))
    (entry,) = names["inputs"]
    assert entry["model"] == name
    atc_name = entry["model.onnx"]
    assert atc_name == name if carried(name) else carried(atc_name)
    model = onnx.load(os.path.join(out, "model.onnx"))
    assert model.graph.input[0].name == atc_name and model.graph.node[0].input[0] == atc_name
    assert re.fullmatch(r"inputs/[A-Za-z0-9_][A-Za-z0-9_.-]*\.bin", entry["file"]), entry["file"]
    assert os.path.getsize(os.path.join(out, entry["file"])) == 16
    with np.load(os.path.join(out, "inputs", "inputs.npz")) as npz:
        assert npz.files == [name]
    readme = open(os.path.join(out, "README.md"), encoding="utf-8").read()
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f\u2028\u2029\u202e]", readme)
    assert f"Written by {untrusted.md_code(f'bridge export {untrusted.shell_word(model_path)} --to ge')} (" in readme

    logs = case / "logs"
    logs.mkdir()
    work = case / "work"
    work.mkdir()
    res = _run(os.path.join(out, "atc.sh"), work, bench, logs)
    assert res.returncode == 0, res.stderr
    assert f"--input_shape={atc_name}:1,4" in _argv(logs, "atc")
    res = _run(os.path.join(out, "opp", "install.sh"), work, bench, logs)
    assert res.returncode == 0, res.stderr
    cmake = _argv(logs, "cmake")
    assert "-DBRIDGE_VENDOR=bridge" in cmake and cmake[-1] == os.path.join(out, "opp", "installed")
    assert "load_priority=bridge" in open(os.path.join(out, "opp", "installed", "vendors", "config.ini")).read()
    # the README's commands, as a user would paste them
    lines = [ln.strip() for ln in readme.splitlines() if ln.strip().startswith(("msame ", "bridge parity "))]
    assert len(lines) == 2, lines
    script = case / "readme.sh"
    script.write_text("\n".join(ln.replace("<time>", "T") for ln in lines) + "\n")
    res = _run(str(script), out, bench, logs)
    assert res.returncode == 0, res.stderr
    assert _argv(logs, "bridge")[1] == model_path
    assert _argv(logs, "msame")[3] == entry["file"]
    assert not os.path.exists(logs / "touch.args") and not os.path.exists(logs / "id.args")


def test_fuzzed_names_never_escape(tmp_path, bench, capsys):
    rng = random.Random(SEED)
    canary = tmp_path / "canary"
    canary.mkdir()
    names = _fixed(canary) + _random(rng, 20)
    refused = 0
    for i, name in enumerate(names):
        case = tmp_path / f"c{i}"
        case.mkdir()
        stem = name if name and "/" not in name and "\0" not in name and len(name) < 200 and name not in (".", "..") \
            else f"m{i}"
        model_path = str(case / f"{stem}.onnx")
        out_name = rng.choice(names)
        if out_name == name or not out_name:
            out_name = "y"
        _model(model_path, name, out_name, node=rng.choice(names).replace("\0", ""))
        before = _tree(case)
        out = case / "deep" / "er" / "out"
        rc = main(["export", model_path, "--to", "ge", "--opset", "13", "-o", str(out)])
        err = capsys.readouterr().err
        if rc == 0:
            assert _tree(case) == sorted(before + ["deep", "deep/er", "deep/er/out"] +
                                         [f"deep/er/out/{r}" for r in _tree(out)]), name
            _check_bundle(str(out), case, bench, name, model_path)
        else:
            refused += 1
            assert rc in (1, 2) and "Traceback" not in err, err
            assert untrusted.shown(name)[:40] in err or "NUL" in err, (name, err)
            assert not os.path.exists(out), name
        assert os.listdir(canary) == [], name
    assert refused <= len(names) // 4, f"{refused} of {len(names)} names refused"


def test_issue_findings_are_gone(tmp_path, bench, capsys):
    """The two findings of issue 13, exactly as reported."""
    evil = f"x$(touch {tmp_path}/pwned)`touch {tmp_path}/pwned2`"
    _model(str(tmp_path / "evil.onnx"), evil, "y", "n")
    assert main(["export", str(tmp_path / "evil.onnx"), "--to", "ge", "--opset", "13",
                 "-o", str(tmp_path / "out")]) == 0
    logs = tmp_path / "logs"
    logs.mkdir()
    assert _run(str(tmp_path / "out" / "atc.sh"), tmp_path, bench, logs).returncode == 0
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    names = json.load(open(tmp_path / "out" / "names.json"))["inputs"][0]
    assert names["model"] == evil and f"--input_shape={names['model.onnx']}:1,4" in _argv(logs, "atc")

    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    _model(str(tmp_path / "evil2.onnx"), "../../escaped_input", "y", "n")
    assert main(["export", str(tmp_path / "evil2.onnx"), "--to", "ge", "--opset", "13", "-o", str(deep / "out")]) == 0
    capsys.readouterr()
    assert os.listdir(deep) == ["out"] and os.listdir(tmp_path / "a") == ["b"]
    assert "escaped_input.bin" in os.listdir(deep / "out" / "inputs")
    atc = open(deep / "out" / "atc.sh").read()
    assert "input_shape='../../escaped_input:1,4'" in atc   # the name itself, verbatim and quoted


# -- the quoting rules themselves ---------------------------------------------------
@pytest.mark.parametrize("s", ["x", "a'b", "'", "a\nb", "\r\t", "ü名", "$(id)`id`", "\\", "a\u2028b", "x" * 3000])
def test_shell_word_is_one_verbatim_word(s):
    got = subprocess.run(["bash", "-c", f"printf '%s' {untrusted.shell_word(s)}"], capture_output=True, timeout=10)
    assert got.stdout.decode() == s
    assert "\n" not in untrusted.shell_word(s)


def test_shell_word_refuses_nul():
    with pytest.raises(untrusted.UntrustedNameError, match="NUL"):
        untrusted.shell_word("a\0b")


@pytest.mark.parametrize("s", ["x", 'a"b', "a\\b", "??=", "a\nb\0c", "ü名", "\x01" + "7"])
def test_cpp_string_round_trips(s):
    lit = untrusted.cpp_string(s)
    # a C++ literal of printable ASCII only, whose escapes decode back to the UTF-8 bytes
    assert re.fullmatch(r'"(?:[ !#-\[\]-~]|\\[0-7]{3}|\\["\\?])*"', lit) and "?" not in lit.replace("\\?", "")
    body = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), lit[1:-1].encode())
    assert re.sub(rb'\\(["\\?])', rb"\1", body).decode() == s


@pytest.mark.parametrize("s", ["x", "`", "a``b", "` x", "a\n\nb", "<script>", "a|b", ""])
def test_md_code_is_one_code_span(s):
    code = untrusted.md_code(s)
    assert "\n" not in code
    if s:
        fence = re.match(r"`+", code).group()
        inner = code[len(fence):-len(fence)]
        assert code.endswith(fence) and fence not in inner and inner.strip(" ") == untrusted._visible(s).strip(" ")
    assert "\\|" in untrusted.md_cell(s) or "|" not in s


def test_file_stems_are_plain_and_unique():
    names = ["x", "X", "../../e", "", "a b", "a_b", ".hidden", "名", "x" * 300, "/etc/passwd"]
    stems = untrusted.file_stems(names)
    assert stems["x"] == "x" and stems["../../e"] == "e" and stems["/etc/passwd"] == "etc_passwd"
    assert len({s.casefold() for s in stems.values()}) == len(names)
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,70}", s) for s in stems.values()), stems


def test_inside_refuses_ways_out(tmp_path):
    (tmp_path / "root").mkdir()
    os.symlink(tmp_path, tmp_path / "root" / "up")
    assert untrusted.inside(str(tmp_path / "root"), "a/b.bin") == str(tmp_path / "root" / "a/b.bin")
    for rel in ("../x", "a/../../x", "/etc/passwd", "", "a\0b", "up/x", "C:x", "a//b"):
        with pytest.raises(untrusted.UntrustedNameError):
            untrusted.inside(str(tmp_path / "root"), rel)


def test_npz_keys_are_the_names_verbatim():
    names = ["file", "allow_pickle", "../../x", "/abs", "a\nb", "ü名", "x" * 3000, "x.npy", "arr_0", ""]
    buf = io.BytesIO()
    untrusted.write_npz(buf, {n: np.full(2, i) for i, n in enumerate(names)})
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as got:
        assert sorted(got.files) == sorted(names)
        assert all(int(got[n][0]) == i for i, n in enumerate(names))


# -- reading ------------------------------------------------------------------------
def _external_model(folder, location):
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [t])
    path = os.path.join(folder, "m.onnx")
    with open(path, "wb") as f:
        f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    return path


@pytest.mark.parametrize("location,message", [
    ("../secret.bin", "not a relative path inside"), ("{abs}", "not a relative path inside"),
    ("link.bin", "symbolic link"), ("missing.bin", "missing"), ("sub/../../secret.bin", "not a relative path")])
def test_external_data_outside_the_model_folder_is_refused(tmp_path, location, message, capsys):
    from bridge import modelsource
    (tmp_path / "secret.bin").write_bytes(np.ones(4, np.float32).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    os.symlink(tmp_path / "secret.bin", folder / "link.bin")
    path = _external_model(str(folder), location.format(abs=tmp_path / "secret.bin"))
    with pytest.raises(modelsource.ModelSourceError, match=message):
        modelsource.resolve(path)
    assert main(["export", path, "--to", "ge", "--opset", "13", "-o", str(tmp_path / "out")]) == 2
    assert "refusing the ONNX file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_external_data_inside_is_read_into_the_bundle(tmp_path, capsys):
    (tmp_path / "w.bin").write_bytes(np.full(4, 2, np.float32).tobytes())
    path = _external_model(str(tmp_path), "w.bin")
    assert main(["export", path, "--to", "ge", "--opset", "13", "-o", str(tmp_path / "out")]) == 0
    model = onnx.load(str(tmp_path / "out" / "model.onnx"), load_external_data=False)
    assert model.graph.initializer[0].data_location == TensorProto.DEFAULT
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [2, 2, 2, 2]


def test_load_outputs_reads_only_inside_its_folder(tmp_path):
    from bridge.parity.inputs import InputError
    from bridge.parity.loaded import load_outputs
    ref = {"y": np.ones((1, 4), np.float32)}
    (tmp_path / "secret.bin").write_bytes(np.full(4, 3, np.float32).tobytes())
    board = tmp_path / "board"
    board.mkdir()
    np.ones(4, np.float32).tofile(board / "model_output_0.bin")
    assert load_outputs(str(board), ref, "--load-outputs ge")["y"].tolist() == [[1, 1, 1, 1]]
    os.unlink(board / "model_output_0.bin")
    os.symlink(tmp_path / "secret.bin", board / "model_output_0.bin")
    with pytest.raises(InputError, match="symbolic link"):
        load_outputs(str(board), ref, "--load-outputs ge")


def test_save_inputs_keeps_names_that_are_numpy_arguments(tmp_path):
    from bridge.parity import inputs
    arrays = {"file": np.ones(2), "allow_pickle": np.zeros(3), "../x": np.ones(1)}
    inputs.save(str(tmp_path / "in.npz"), arrays)
    assert os.listdir(tmp_path) == ["in.npz"]
    got = inputs.load(str(tmp_path / "in.npz"))
    assert sorted(got) == sorted(arrays) and got["allow_pickle"].shape == (3,)


def test_savedmodel_folder_with_a_link_out_is_refused(tmp_path):
    from bridge import modelsource
    folder = tmp_path / "sm"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"")
    os.symlink(tmp_path, folder / "variables" / "escape")
    with pytest.raises(modelsource.ModelSourceError, match="symbolic link out of it"):
        modelsource.resolve(str(folder))


@pytest.mark.parametrize("member", ["../evil.txt", "/etc/evil", "a/../../evil"])
def test_keras_archive_with_a_member_out_is_refused(tmp_path, member):
    from bridge import modelsource
    path = tmp_path / "m.keras"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("config.json", "{}")
        zf.writestr(member, "x")
    with pytest.raises(modelsource.ModelSourceError, match="leaves the archive"):
        modelsource.resolve(str(path))


def test_keras_lambda_is_refused_in_safe_mode(tmp_path):
    import keras
    from bridge import modelsource
    inp = keras.Input((4,), name="x")
    keras.Model(inp, keras.layers.Lambda(lambda t: t * 2.0)(inp)).save(tmp_path / "lam.keras")
    with pytest.raises(modelsource.ModelSourceError, match="Python code .* safe mode"):
        modelsource.resolve(str(tmp_path / "lam.keras"))


@pytest.mark.parametrize("rel", ["../x.bin", "inputs/../../x.bin", "/tmp/x.bin", "a/\0.bin"])
def test_bundle_writer_refuses_paths_out(tmp_path, rel):
    from bridge.converters.export_ge import _write_tree
    from bridge.exporting import ExportError
    with pytest.raises(ExportError, match="refusing to write"):
        _write_tree({"README.md": b"x", rel: b"x"}, str(tmp_path / "out"))
    assert _tree(tmp_path) == ["out"]


def test_links_already_in_the_output_folder_are_replaced_not_followed(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(outside, out / "inputs")
    os.symlink(outside / "atc.sh", out / "atc.sh")
    _model(str(tmp_path / "m.onnx"), "x", "y", "n")
    assert main(["export", str(tmp_path / "m.onnx"), "--to", "ge", "--opset", "13", "-o", str(out)]) == 0
    capsys.readouterr()
    assert os.listdir(outside) == []
    assert not os.path.islink(out / "inputs") and not os.path.islink(out / "atc.sh")
    assert sorted(os.listdir(out / "inputs")) == ["inputs.npz", "x.bin"]


def test_plugin_folder_links_out_are_not_read(tmp_path):
    from bridge.ascend.origins import registered_in_dir
    (tmp_path / "elsewhere.cc").write_text('REGISTER_CUSTOM_OP("X").OriginOpType("ai.onnx::11::Evil");')
    (tmp_path / "opp").mkdir()
    (tmp_path / "opp" / "own.cc").write_text('REGISTER_CUSTOM_OP("X").OriginOpType("ai.onnx::11::Own");')
    os.symlink(tmp_path / "elsewhere.cc", tmp_path / "opp" / "link.cc")
    assert registered_in_dir(str(tmp_path / "opp")) == {"ai.onnx::11::Own"}


@pytest.mark.parametrize("asset", ["../../etc/passwd", "/etc/passwd"])
def test_savedmodel_asset_file_out_of_the_folder_is_refused(tmp_path, asset):
    from tensorflow.core.protobuf import saved_model_pb2
    from bridge import modelsource
    sm = saved_model_pb2.SavedModel()
    sm.meta_graphs.add().asset_file_def.add().filename = asset
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(sm.SerializeToString())
    with pytest.raises(modelsource.ModelSourceError, match="asset file name .* leaves the folder"):
        modelsource.resolve(str(tmp_path / "sm"))
