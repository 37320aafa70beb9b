"""The zoo's keras_hub backbones (benchmarks/zoo.py HUB): CSPNet's
Conv2D -> BatchNormalization -> LeakyReLU(0.01) blocks all fuse, at keras_hub's
own slope, and compute what the unfused backbone does; a backbone's input
names survive saving and loading (keras_hub rebuilds its inputs on every load,
with new made-up names each time)."""
from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")
keras_hub = pytest.importorskip("keras_hub")

from conftest import assert_close  # noqa: E402
from test_zoo import _zoo  # noqa: E402  (benchmarks/zoo.py, loaded once)


def _cspnet(**overrides):
    config, _ = _zoo().HUB["CSPNetBackbone"]
    keras.utils.set_random_seed(3)
    model = keras_hub.models.CSPNetBackbone(**dict(config, **overrides))
    rng = np.random.default_rng(3)
    for layer in model.layers:  # inference statistics away from (0, 1), so folding them wrongly shows
        if isinstance(layer, keras.layers.BatchNormalization):
            n = layer.moving_mean.shape[0]
            layer.moving_mean.assign(rng.normal(0, 0.5, n).astype(np.float32))
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, n).astype(np.float32))
            layer.beta.assign(rng.normal(-0.3, 0.3, n).astype(np.float32))  # negative: the slope shows
    return model


def test_cspnet_fuses_every_conv_bn_leaky_block():
    from bridge.converters import fuse
    from bridge.converters.fuse_layers import FusedConvBnLeaky
    model = _cspnet(image_shape=(None, None, 3))
    convs = [l for l in model.layers if isinstance(l, keras.layers.Conv2D)]
    leaky = [l for l in model.layers if isinstance(l, keras.layers.LeakyReLU)]
    assert {l.negative_slope for l in leaky} == {0.01} and len(leaky) == len(convs)  # keras_hub's, as built
    fused, report = fuse(model)
    assert report.fused("conv_bn_leaky") == len(convs) == 13 and not report.skipped("conv_bn_leaky")
    assert report.fused("zero_padding") == 2  # each stage's stride-2 conv takes its padding in
    blocks = [l for l in fused.layers if isinstance(l, FusedConvBnLeaky)]
    assert len(blocks) == 13 and all(b.op_attrs["alpha"] == pytest.approx(0.01) for b in blocks)
    rng = np.random.default_rng(0)
    for shape in [(2, 32, 32, 3), (1, 17, 23, 3)]:
        x = rng.uniform(0, 1, size=shape).astype(np.float32)
        ref = np.asarray(model(x), np.float64)
        assert (ref < 0).any()
        assert_close("YoloConvBnLeaky", np.asarray(fused(x)), ref, what=f"CSPNet {shape}")


def test_backbone_input_names_survive_loading(tmp_path):
    """A keras_hub image backbone's one input is 'input_layer' in memory and in
    every load (not keras_tensor_N, N new each time), so an export from one
    load takes the inputs of the next; a named input keeps its name."""
    from bridge import modelsource
    model = _cspnet()
    path = tmp_path / "cspnet.keras"
    model.save(path)
    loads = [modelsource.resolve(str(path)) for _ in range(2)]
    assert [i.name for i in modelsource.from_object(model).inputs] == ["input_layer"]
    assert [[i.name for i in src.inputs] for src in loads] == [["input_layer"]] * 2
    assert loads[0].model.inputs[0].name != loads[1].model.inputs[0].name  # what Keras itself names them
    config, _ = _zoo().HUB["HGNetV2Backbone"]
    named = keras_hub.models.HGNetV2Backbone(**config)
    assert modelsource.keras_input_names(named) == ["pixel_values_input"]
    x = keras.Input((4,), name="keras_tensor_7x")
    assert modelsource.keras_input_names(keras.Model(x, keras.layers.Dense(2)(x))) == ["keras_tensor_7x"]


@pytest.mark.slow
def test_every_hub_backbone_builds_small_and_runs_at_bridges_sample_shape():
    """Each HUB config builds offline, stays small (DeepLabV3's and RetinaNet's
    heads are 256 wide whatever the config: under 1.5M weights; the rest under
    200k, ResNet's 64 filters it insists on the largest of them), and runs at
    the shape bridge samples its open dims at, since the zoo gives no
    --input-shape (Moonshine's audio: the least its Conv1D stack takes;
    PARSeq's tokens: its max_label_length)."""
    from bridge import modelsource
    zoo = _zoo()
    for cls, (config, _) in zoo.HUB.items():
        model = zoo._hub(cls, config)(32)
        limit = 1_500_000 if cls in ("DeepLabV3Backbone", "RetinaNetBackbone") else 200_000
        assert model.count_params() < limit, (cls, model.count_params())
        src = modelsource.from_object(model)
        feeds = src.sample_inputs(seed=0)
        out = model(modelsource.keras_call_args(model, [feeds[i.name] for i in src.inputs]))
        assert all(np.isfinite(np.asarray(v)).all() for v in keras.tree.flatten(out)), cls
