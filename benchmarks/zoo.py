"""The model zoo: real model definitions nobody here wrote, built offline with
random weights at small input sizes, each taken over every road as a user would
(`bridge export --to onnx` custom and lowered, `--to tflite`, `--to ge`,
`bridge parity`), and the same model through a plain tf2onnx export, side by
side in one run.

    python benchmarks/zoo.py --quick            # a handful of small models (CI runs this)
    python benchmarks/zoo.py                    # every model (a benchmark: long)
    python benchmarks/zoo.py --only ResNet50,bert-hub --size 64 --json zoo.json
    python benchmarks/zoo.py --roads fuse --json counts.json   # fused counts only (SavedModel vs .keras)

Models: every `keras.applications` model (weights=None, at the smallest size it
allows or --size), keras_hub backbones from small configs (when keras-hub is
installed: the `zoo` extra), each again as a SavedModel (`model.export`, fused at
graph level: its counts must equal the .keras row's), bridge's built-ins, and
models as teams have them (recurrent, mixed_float16, a length left open, a
registered custom layer given with --import). No row gives --input-shape: a
model's open dims are run at bridge's sample shape. Weights are at realistic
scales (`calibrate`): the BN ending each residual branch scaled by
1/sqrt(branches), every BatchNormalization's statistics calibrated on 32
generated inputs other than parity's (a training-mode pass with momentum 0 and
dropout off, layer by layer in effect, since each BN sees the already-normalised
output of the ones before it), so activations stay O(1) instead of growing or
dying with depth, and a softmax classifier scaled to logits of a few units
across its classes (a trained model's), so its probabilities are not decided
by float rounding. Without these, 12 deep CNNs here were ill-conditioned at
float32: TF float32 itself as far from the float64 answer as every runtime.

One row per model: what was fused, which roads pass, the max error per parity
runtime, bridge's export time, and on onnxruntime bridge's export against the
plain tf2onnx one (whether plain tf2onnx converts it at all, and the median run
time of each, timed in alternating rounds). A road that fails says why in one
line; a Python traceback from bridge is itself a failure ("crash").
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import alternating_medians  # noqa: E402

from bridge.parity.conditioning import ILL_CONDITIONED as ILL  # noqa: E402  (bridge parity's third verdict)

ROADS = ("onnx", "lowered", "tflite", "ge", "parity")


# -- the models -----------------------------------------------------------------
@dataclass
class ZooModel:
    name: str
    family: str                          # keras.applications | keras_hub | built-in
    build: Callable[[int], object]       # size -> keras.Model (or a built-in name)
    min_size: int = 32
    quick: bool = False
    saved: bool = False                  # taken as a SavedModel (model.export): fused at graph level
    imports: Tuple[str, ...] = ()        # --import files the model's classes come from (a team's layers)


APPLICATIONS = {  # name: smallest input size keras.applications accepts
    "Xception": 71, "VGG16": 32, "VGG19": 32, "ResNet50": 32, "ResNet101": 32, "ResNet152": 32,
    "ResNet50V2": 32, "ResNet101V2": 32, "ResNet152V2": 32, "InceptionV3": 75, "InceptionResNetV2": 75,
    "MobileNet": 32, "MobileNetV2": 32, "MobileNetV3Small": 32, "MobileNetV3Large": 32,
    "DenseNet121": 32, "DenseNet169": 32, "DenseNet201": 32, "NASNetMobile": 32, "NASNetLarge": 32,
    **{f"EfficientNetB{i}": 32 for i in range(8)},
    **{f"EfficientNetV2B{i}": 32 for i in range(4)}, "EfficientNetV2S": 32, "EfficientNetV2M": 32,
    "EfficientNetV2L": 32,
    "ConvNeXtTiny": 32, "ConvNeXtSmall": 32, "ConvNeXtBase": 32, "ConvNeXtLarge": 32, "ConvNeXtXLarge": 32,
}
QUICK_APPLICATIONS = ("MobileNetV3Small",)
# the largest (by weights) run last, so a --budget-s sweep covers the most models
HEAVY = ("VGG16", "VGG19", "ResNet152", "ResNet152V2", "InceptionResNetV2", "NASNetLarge", "EfficientNetB5",
         "EfficientNetB6", "EfficientNetB7", "EfficientNetV2M", "EfficientNetV2L", "ConvNeXtBase", "ConvNeXtLarge",
         "ConvNeXtXLarge")

SEQ = 12  # token sequence length of the text backbones
TEXT = dict(vocabulary_size=97, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32,
            max_sequence_length=32)
DECODER = dict(vocabulary_size=97, num_layers=2, num_query_heads=2, num_key_value_heads=1, hidden_dim=16,
               intermediate_dim=32)
IMAGE = dict(image_shape=(32, 32, 3))
TEXT_CORE = {k: v for k, v in TEXT.items() if k != "max_sequence_length"}
VISION_TOWER = dict(patch_size=8, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32)
TEXT_TOWER = dict(vocabulary_size=97, embedding_dim=16, hidden_dim=16, num_layers=1, num_heads=2,
                  intermediate_dim=32, max_sequence_length=SEQ)
MIT = dict(layerwise_depths=[1, 1], num_layers=2, layerwise_num_heads=[1, 2], layerwise_sr_ratios=[2, 1],
           max_drop_path_rate=0.0, layerwise_patch_sizes=[7, 3], layerwise_strides=[4, 2], hidden_dims=[16, 32],
           **IMAGE)
# keras_hub insists on 64 filters in the stem and the first stage
RESNET = dict(input_conv_filters=[64], input_conv_kernel_sizes=[7], stackwise_num_filters=[64, 32],
              stackwise_num_blocks=[1, 1], stackwise_num_strides=[1, 2], block_type="basic_block", **IMAGE)
RESNET3 = dict(RESNET, stackwise_num_filters=[64, 32, 32], stackwise_num_blocks=[1, 1, 1],
               stackwise_num_strides=[1, 2, 2])  # pyramid levels P2-P4, for the heads that take them
PARSEQ_LABEL = 6


@dataclass(frozen=True)
class Part:
    """A keras_hub model given to another's config (CLIP's two encoders), built with it."""
    cls: str
    config: dict


HUB = {  # keras_hub class: (small config, quick)
    "BertBackbone": (TEXT, True),
    "DistilBertBackbone": (TEXT, False),
    "RobertaBackbone": (TEXT, False),
    "AlbertBackbone": (dict(TEXT, embedding_dim=8, num_groups=1, num_inner_repetitions=1), False),
    "ElectraBackbone": ({**{k: v for k, v in TEXT.items() if k != "vocabulary_size"}, "vocab_size": 97,
                         "embedding_dim": 16}, False),
    "GPT2Backbone": (TEXT, False),
    "OPTBackbone": (TEXT, False),
    "DebertaV3Backbone": (dict(TEXT, bucket_size=8), False),
    "ViTBackbone": (dict(image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
                         mlp_dim=32), True),
    "XLMRobertaBackbone": (TEXT, False),
    "FNetBackbone": ({k: v for k, v in TEXT.items() if k != "num_heads"}, False),
    # decoders: rotary positions, RMS norms, grouped-query attention
    **{cls: (dict(DECODER, head_dim=8) if cls == "GemmaBackbone" else DECODER, False)
       for cls in ("LlamaBackbone", "MistralBackbone", "QwenBackbone", "GemmaBackbone", "Phi3Backbone")},
    **{cls: (dict({k: v for k, v in TEXT.items() if k != "max_sequence_length" or cls == "GPTNeoXBackbone"}), False)
       for cls in ("BloomBackbone", "GPTNeoXBackbone")},
    "FalconBackbone": ({"vocabulary_size": 97, "num_layers": 2, "num_attention_heads": 2, "hidden_dim": 16,
                        "intermediate_dim": 32}, False),
    # vision: convolutional (BatchNorm everywhere; CSPNet's Conv -> BN -> LeakyReLU(0.01) blocks fuse)
    "CSPNetBackbone": (dict(stem_filters=8, stem_kernel_size=3, stem_strides=1, stackwise_depth=[1, 1],
                            stackwise_strides=[2, 2], stackwise_num_filters=[16, 32], block_type="dark_block",
                            stage_type="csp", bottle_ratio=(0.5, 1.0), block_ratio=(1.0, 0.5),
                            expand_ratio=(2.0, 1.0), stem_padding="same", down_growth=True, **IMAGE), True),
    "ResNetBackbone": (RESNET, False),
    "HGNetV2Backbone": (dict(depths=[1, 1], embedding_size=16, hidden_sizes=[16, 32], stem_channels=[3, 8, 16],
                             hidden_act="relu", use_learnable_affine_block=False,
                             stackwise_stage_filters=[[16, 8, 16, 1, 1, 3], [16, 8, 32, 1, 1, 3]],
                             apply_downsample=[False, True], use_lightweight_conv_block=[False, True], **IMAGE), False),
    "MobileNetBackbone": (dict(stackwise_expansion=[[1], [2]], stackwise_num_blocks=[1, 1],
                               stackwise_num_filters=[[16], [24]], stackwise_kernel_size=[[3], [3]],
                               stackwise_num_strides=[[2], [2]], stackwise_se_ratio=[[0.25], [None]],
                               stackwise_activation=[["relu"], ["hard_swish"]], stackwise_padding=[[1], [1]],
                               output_num_filters=32, depthwise_filters=8, depthwise_stride=2,
                               depthwise_residual=False, last_layer_filter=32, input_num_filters=8, **IMAGE), False),
    "DenseNetBackbone": (dict(stackwise_num_repeats=[1, 1], growth_rate=8, **IMAGE), False),
    # num_features stays at its default 1280: keras_hub's config leaves it out, so a smaller one does not load
    "EfficientNetBackbone": (dict(stackwise_width_coefficients=[1.0] * 2, stackwise_depth_coefficients=[1.0] * 2,
                                  stackwise_kernel_sizes=[3, 3], stackwise_num_repeats=[1, 1],
                                  stackwise_input_filters=[16, 16], stackwise_output_filters=[16, 24],
                                  stackwise_expansion_ratios=[1, 2], stackwise_squeeze_and_excite_ratios=[0, 0.25],
                                  stackwise_strides=[1, 2], stackwise_block_types=["fused", "unfused"],
                                  stackwise_force_input_filters=[0, 0], stackwise_nores_option=[False, False],
                                  dropout=0.0, input_shape=IMAGE["image_shape"]), False),
    "VGGBackbone": (dict(stackwise_num_repeats=[1, 1], stackwise_num_filters=[8, 16], **IMAGE), False),
    "XceptionBackbone": (dict(stackwise_conv_filters=[[8, 16], [16, 32], [32, 32]],
                              stackwise_pooling=[True, True, False], **IMAGE), False),
    # vision: transformers
    "MiTBackbone": (MIT, False),
    "DeiTBackbone": (dict(patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32, **IMAGE),
                     False),
    "SwinTransformerBackbone": (dict(embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4, patch_size=4,
                                     drop_path=0.0, **IMAGE), False),
    "DINOV2Backbone": (dict(patch_size=8, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32,
                            position_embedding_shape=(32, 32, 3), **IMAGE), False),
    # text: encoder-decoders and others
    "T5Backbone": (dict(TEXT_CORE, dropout=0.0), False),
    "BartBackbone": (dict(TEXT, dropout=0.0), False),
    "XLNetBackbone": (TEXT_CORE, False),
    "RoformerV2Backbone": (dict(TEXT_CORE, head_size=8, dropout=0.0), False),
    "ESM2Backbone": (dict(TEXT, dropout=0.0), False),
    "WhisperBackbone": (dict(TEXT_CORE, num_mels=8, max_encoder_sequence_length=32, max_decoder_sequence_length=32),
                        False),
    # image + text
    "CLIPBackbone": (dict(vision_encoder=Part("CLIPVisionEncoder", dict(VISION_TOWER, **IMAGE)),
                          text_encoder=Part("CLIPTextEncoder", TEXT_TOWER), projection_dim=16), False),
    "SigLIPBackbone": (dict(vision_encoder=Part("SigLIPVisionEncoder", dict(VISION_TOWER, **IMAGE)),
                            text_encoder=Part("SigLIPTextEncoder", TEXT_TOWER)), False),
    # more vision: newer ViTs, and heads on a small encoder (DeepLabV3's ASPP and RetinaNet's FPN are 256 wide,
    # fixed by keras_hub: ~0.5M and ~1.3M weights)
    "DINOV3Backbone": (dict(patch_size=8, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32, **IMAGE),
                       False),
    "ViTDetBackbone": (dict(hidden_size=16, num_layers=2, intermediate_dim=32, num_heads=2,
                            global_attention_layer_indices=[1], patch_size=8, num_output_channels=16, window_size=2,
                            **IMAGE), False),
    "SegFormerBackbone": (dict(image_encoder=Part("MiTBackbone", MIT), projection_filters=16), False),
    "DeepLabV3Backbone": (dict(image_encoder=Part("ResNetBackbone", RESNET3), spatial_pyramid_pooling_key="P4",
                               upsampling_size=4, dilation_rates=[2], low_level_feature_key="P2",
                               projection_filters=16, **IMAGE), False),
    "RetinaNetBackbone": (dict(image_encoder=Part("ResNetBackbone", RESNET3), min_level=3, max_level=4, use_p5=False,
                               **IMAGE), False),
    "PARSeqBackbone": (dict(image_encoder=Part("ViTBackbone", dict(IMAGE, patch_size=8, num_layers=1, num_heads=2,
                                                                   hidden_dim=16, mlp_dim=32)),
                            vocabulary_size=20, max_label_length=PARSEQ_LABEL, decoder_hidden_dim=16,
                            num_decoder_layers=1, num_decoder_heads=2, decoder_mlp_dim=32, dropout_rate=0.0,
                            attention_dropout=0.0), False),
    # more decoders: mixtures of experts (2 experts, top 1), RWKV's recurrence, sliding-window layers
    "Llama3Backbone": (DECODER, False),
    "Qwen3Backbone": (dict(DECODER, head_dim=8), False),
    "Gemma3Backbone": (dict(DECODER, image_size=32, head_dim=8), False),
    "MixtralBackbone": (dict(DECODER, num_experts=2, top_k=1), False),
    "QwenMoeBackbone": (dict(DECODER, moe_intermediate_dim=16, shared_expert_intermediate_dim=16, num_experts=2,
                             top_k=1), False),
    "Qwen3MoeBackbone": (dict(DECODER, moe_intermediate_dim=16, num_experts=2, top_k=1, head_dim=8), False),
    "GptOssBackbone": (dict(DECODER, num_experts=2, top_k=1, head_dim=8), False),
    "SmolLM3Backbone": (dict(vocabulary_size=97, hidden_dim=16, intermediate_dim=32, num_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, attention_bias=False,
                             attention_dropout=0.0, rope_layer_enabled_list=[True, False],
                             layer_types=["full_attention"] * 2, mlp_bias=False, layer_norm_epsilon=1e-6,
                             max_position_embeddings=32, rope_theta=10000.0, partial_rotary_factor=1.0), False),
    "RWKV7Backbone": (dict(hidden_size=16, head_size=8, num_layers=2, vocabulary_size=97, intermediate_dim=32,
                           gate_lora=8, mv_lora=8, aaa_lora=8, decay_lora=8), False),
    # more encoder-decoders
    "EdRecBackbone": (dict(vocab_size=97, num_layers_enc=1, num_layers_dec=1, hidden_dim=16, intermediate_dim=32,
                           num_heads=2), False),
    "T5GemmaBackbone": ({**{f"{side}_{k}": v for side in ("encoder", "decoder") for k, v in
                            dict(hidden_dim=16, intermediate_dim=32, num_layers=1, num_attention_heads=2,
                                 num_key_value_heads=1, head_dim=8, layer_types=["full_attention"]).items()},
                         "vocabulary_size": 97}, False),
    "MoonshineBackbone": (dict(vocabulary_size=97, filter_dim=16, encoder_num_layers=1, decoder_num_layers=1,
                               hidden_dim=16, intermediate_dim=32, encoder_num_heads=2, decoder_num_heads=2,
                               max_position_embeddings=64), False),
}
def _application(name):
    def build(size):
        import keras
        return getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))
    return build


def _hub(cls, config):
    def build(size):
        import keras_hub
        parts = {k: getattr(keras_hub.models, v.cls)(**v.config) for k, v in config.items() if isinstance(v, Part)}
        return getattr(keras_hub.models, cls)(**{**config, **parts})
    return build


def _tagger(size):
    """A sequence tagger as a team writes one: LSTM, then Bidirectional(GRU), per-step logits."""
    import keras
    from keras import layers
    x = keras.Input((SEQ, 8), name="features")
    h = layers.LSTM(16, return_sequences=True)(x)
    h = layers.Bidirectional(layers.GRU(8, return_sequences=True))(h)
    h = layers.SimpleRNN(8, return_sequences=True)(h)
    return keras.Model(x, layers.Dense(5, name="tags")(h), name="tagger")


def _text_classifier(size):
    """A text classifier of any length (keras.Input((None,), dtype="int32")): no --input-shape, the export
    keeps the length open and the roads run at bridge's sample length."""
    import keras
    from keras import layers
    ids = keras.Input((None,), dtype="int32", name="token_ids")
    h = layers.Embedding(97, 16)(ids)
    h = layers.LayerNormalization()(layers.Dense(16, activation="relu")(h))
    h = layers.GlobalAveragePooling1D()(h)
    return keras.Model(ids, layers.Dense(4, activation="softmax", name="probs")(h), name="text_classifier")


def _mixed_cnn(size):
    """A mixed_float16 classifier (Keras' mixed-precision recipe): float16 compute, float32 logits."""
    import keras
    from keras import layers
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x = keras.Input((size, size, 3), name="image")
        h = x
        for filters in (16, 32):
            h = layers.Conv2D(filters, 3, strides=2, padding="same", use_bias=False)(h)
            h = layers.BatchNormalization()(h)
            h = layers.LeakyReLU(0.1)(h)
        h = layers.GlobalAveragePooling2D()(h)
        h = layers.LayerNormalization()(layers.Dense(32)(h))
        return keras.Model(x, layers.Dense(10, dtype="float32", name="logits")(h), name="mixed_cnn")
    finally:
        keras.mixed_precision.set_global_policy("float32")


def models() -> List[ZooModel]:
    """Every row. No row gives --input-shape: a model's dims are what it was built
    with (an application at `size`, a keras_hub backbone at its config's image
    shape, a sequence left open), and bridge runs the open ones at its sample
    shape (batch 1; a length from the model's config or its default)."""
    out = [ZooModel(n, "keras.applications", _application(n), m, n in QUICK_APPLICATIONS)
           for n, m in sorted(APPLICATIONS.items(), key=lambda kv: kv[0] in HEAVY)]
    for cls, (config, quick) in HUB.items():
        out.append(ZooModel(cls.replace("Backbone", "").lower() + "-hub", "keras_hub", _hub(cls, config), 32, quick))
    out += [ZooModel(name, "built-in", lambda size, n=name: n, 96 if name.startswith("yolo") else 32,
                     name == "yolov3-tiny") for name in BUILTIN_CONFIG]
    # every keras.applications and keras_hub model again as a SavedModel (model.export): graph-level
    # fusion must fuse what its .keras row fuses (summary: "SavedModel rows")
    out += [ZooModel(f"{m.name}{SAVED_SUFFIX}", m.family, m.build, m.min_size, m.name in QUICK_SAVED, saved=True)
            for m in list(out) if m.family in ("keras.applications", "keras_hub")]
    # models as teams have them (only the batch open, or the length too)
    out += [ZooModel("lstm-bigru-tagger", "keras (user)", _tagger),
            ZooModel("mixed-float16-cnn", "keras (user)", _mixed_cnn),
            ZooModel("text-classifier-dynamic", "keras (user)", _text_classifier, quick=True),
            # a team's registered Keras layer: its .keras file loads only with --import of the module defining it
            ZooModel("custom-layer-cnn", "keras (user)", _custom_layer_cnn, imports=(CUSTOM_LAYERS,))]
    return out


SAVED_SUFFIX = "-savedmodel"
QUICK_SAVED = ("cspnet-hub",)   # --quick's SavedModel row: 13 Conv-BN-LeakyReLU blocks at slope 0.01
CUSTOM_LAYERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zoo_custom_layers.py")

# built-in models: their --config (input_size is the model as built: an image side, "?" a length left open)
BUILTIN_CONFIG = {"yolov3-tiny": ["width=0.25", "input_size=96"], "yolov3": ["width=0.25", "input_size=96"],
                  "bert": ["layers=1", "hidden=32", "heads=2", "intermediate=64", "vocab_size=101", "input_size=?"],
                  "minilm": ["input_size=?"]}


def _custom_layer_cnn(size):
    """A team's classifier with its own registered layer (benchmarks/zoo_custom_layers.py)."""
    from bridge import team_imports
    layers_module, = team_imports.import_modules([CUSTOM_LAYERS])  # the module --import loads, once per process
    return layers_module.classifier(size)


# -- realistic random weights -------------------------------------------------------
CALIBRATION_SAMPLES = 32    # BN statistics from 4 images were noise at 1x1 spatial size (4 values per channel):
CALIBRATION_SEED = 1000     # ResNet50 then differed from its own float64 by 1.5e-3, with 32 by 3e-5;
                            # seeds apart from parity's input (seed 0), which the model has not seen


def calibration_feeds(src) -> list:
    return [src.sample_inputs(seed=CALIBRATION_SEED + i) for i in range(CALIBRATION_SAMPLES)]


def calibrate(model, feeds_list) -> None:
    """Realistic scales for a model's random weights: residual branches, then
    BatchNorm statistics, then the classifier's logits."""
    scale_residual_branches(model)
    calibrate_batchnorm(model, feeds_list)
    calibrate_logits(model, feeds_list)


def scale_residual_branches(model) -> int:
    """Scales the layer that ends each residual branch (its BatchNormalization,
    or where none ends it, as in pre-activation ResNetV2, its convolution;
    through dropout too) added to a stream that is not one, by
    1/sqrt(number of such branches), as training leaves them (a trained
    ResNet's last BN per block has gammas of a few tenths): at full scale
    each of ResNet101's 30 blocks grew float32 rounding ~1.3x, and TF float32
    itself ended 1.5e-4 from float64 (ResNet101V2: 1.2e-4). Returns how
    many; run before calibrate_batchnorm, which keeps the scale."""
    import keras
    branches = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if not isinstance(layer, keras.layers.Add) or not layer._inbound_nodes:  # called from a layer's own
            continue                                                                # code (RetinaNet's FPN): no graph
        ends = [_branch_end(node) for node in _inbound_layers(layer)]
        found = [e for e in ends if e is not None]
        if len(found) == 1 and len(ends) == 2:  # a projection shortcut (BN or conv on both sides) is not a branch
            branches.append(found[0])
    factor = 1.0 / np.sqrt(max(len(branches), 1))
    for end in branches:
        for weight in ((end.gamma if end.scale else None, end.beta if end.center else None)
                       if isinstance(end, keras.layers.BatchNormalization) else (end.kernel, end.bias)):
            if weight is not None:
                weight.assign(weight.numpy() * factor)
    return len(branches)


def _inbound_layers(layer) -> list:
    node = layer._inbound_nodes[0]
    return [t._keras_history.operation for t in node.input_tensors]


def _branch_end(layer):
    """The BN or convolution that ends a residual branch at `layer` (through dropout), else None."""
    import keras
    while isinstance(layer, keras.layers.Dropout):
        layer = _inbound_layers(layer)[0]
    return layer if type(layer) in (keras.layers.BatchNormalization, keras.layers.Conv2D) else None


def calibrate_batchnorm(model, feeds_list, passes: int = 2) -> int:
    """Sets every BatchNormalization's moving statistics to those of the
    generated inputs (a training pass with momentum 0), each variance at least
    VARIANCE_FLOOR of its layer's mean, and its scale so the channel leaves
    with variance 1 although its variance is below the layer's epsilon (Keras's
    EfficientNet divides its 0..1 input by 255 again: variance 1e-5 against
    epsilon 1e-3). Dropout and stochastic depth are off during the pass: on,
    they calibrated EfficientNet's BNs to a network inference never runs
    (activations grew to ~500 by block 6). The second pass sees the first
    pass's scales upstream. Returns how many."""
    import keras
    bns = [layer for layer in model._flatten_layers(include_self=False, recursive=True)
           if isinstance(layer, keras.layers.BatchNormalization)]
    if not bns:
        return 0
    from bridge.modelsource import keras_call_args, keras_input_names
    names = keras_input_names(model)
    batch = {n: np.concatenate([f[n] for f in feeds_list]) for n in names}
    gamma0 = [bn.gamma.numpy() if bn.scale else None for bn in bns]
    with _no_dropout(model):
        for _ in range(passes):
            saved = [bn.momentum for bn in bns]
            for bn in bns:
                bn.momentum = 0.0
            try:
                model(keras_call_args(model, [batch[n] for n in names]), training=True)
            finally:
                for bn, m in zip(bns, saved):
                    bn.momentum = m
            for bn, g in zip(bns, gamma0):
                var = bn.moving_variance.numpy()  # a dead channel (variance ~0) would amplify rounding 1/sqrt(eps)
                floor = VARIANCE_FLOOR * float(var.mean()) if var.mean() > 0 else 1.0
                var = np.maximum(var, floor)
                bn.moving_variance.assign(var)
                if g is not None:
                    bn.gamma.assign((g * np.sqrt((var + bn.epsilon) / var)).astype(g.dtype))
    return len(bns)


@contextlib.contextmanager
def _no_dropout(model):
    """Dropout (every rate) and stochastic depth (drop_path_rate) off for a training-mode pass."""
    changed = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        for attr in ("rate", "drop_path_rate"):
            value = getattr(layer, attr, None)
            if isinstance(value, float) and value > 0:
                changed.append((layer, attr, value))
                setattr(layer, attr, 0.0)
    try:
        yield
    finally:
        for layer, attr, value in changed:
            setattr(layer, attr, value)


VARIANCE_FLOOR = 0.01  # of the layer's mean variance: no channel gains more than 10x its layer's typical


LOGIT_STD = 2.0  # a trained classifier's logits spread over a few units, not hundreds


def calibrate_logits(model, feeds_list) -> int:
    """Scales each softmax classifier (a Dense with activation softmax, as every
    keras.applications head) so its logits spread with standard deviation
    LOGIT_STD across the classes of each input: random weights after a deep
    residual stack give logits of ~100, whose softmax is decided by float
    rounding. (Across classes: an offset common to one input's logits, which
    the softmax ignores, made EfficientNet's heads 40x too flat.) Returns how many."""
    import keras
    from bridge.modelsource import keras_call_args, keras_input_names
    heads = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)
             and getattr(layer.activation, "__name__", "") == "softmax"]
    names = keras_input_names(model)
    batch = [np.concatenate([f[n] for f in feeds_list]) for n in names]
    for head in heads:
        x = np.asarray(keras.Model(model.inputs, head.input)(keras_call_args(model, batch)), np.float64)
        logits = x @ head.kernel.numpy() + (head.bias.numpy() if head.use_bias else 0.0)
        logits = logits.reshape(-1, logits.shape[-1])
        std = float(np.sqrt(np.mean(logits.var(axis=-1))))
        if std > 0:
            head.kernel.assign(head.kernel.numpy() * (LOGIT_STD / std))
            if head.use_bias:
                head.bias.assign(head.bias.numpy() * (LOGIT_STD / std))
    return len(heads)


# -- one model --------------------------------------------------------------------------
@dataclass
class Row:
    model: str
    family: str
    size: str = ""                      # the inputs' shapes in the model, ? where it leaves a dim open
    sample: str = ""                    # the shapes its runs take (bridge's sample of the open dims), where any
    built: str = ""                     # "" when built, else why not
    fused: Dict[str, int] = field(default_factory=dict)
    skipped: Dict[str, int] = field(default_factory=dict)
    near_misses: Dict[str, List[str]] = field(default_factory=dict)  # pattern -> its near misses' reasons
    fusion_notes: List[str] = field(default_factory=list)  # the fusion report's notes (a graph it cannot freeze)
    roads: Dict[str, str] = field(default_factory=dict)      # road -> "pass" | why not
    errors: Dict[str, float] = field(default_factory=dict)   # parity runtime -> max abs error (worst output)
    export_s: Optional[float] = None    # bridge export --to onnx, wall seconds
    plain: str = ""                     # plain tf2onnx: "converts" | why not
    plain_export_s: Optional[float] = None
    tf_vs_float64: Optional[float] = None  # TF float32's max error against the float64 run (parity ran one)
    ort_ms: Optional[float] = None      # median run, bridge's custom export on onnxruntime (native kernels)
    plain_ort_ms: Optional[float] = None
    seconds: float = 0.0


def _cli(argv) -> tuple:
    """(exit code, stdout, stderr) of `bridge ARGV` run in this process (TensorFlow
    imported once for the whole sweep); a traceback is caught and reported."""
    from bridge.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = int(e.code or 0)
        except BaseException as e:  # bridge must not end in a traceback: say so
            tb = traceback.extract_tb(e.__traceback__)[-1]
            return 99, "", f"crash: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} " \
                           f"(at {os.path.basename(tb.filename)}:{tb.lineno})"
    return rc, out.getvalue(), err.getvalue()


def _why(rc, out, err) -> str:
    """The one line that says why a command failed."""
    if rc == 99:
        return err[:300]
    lines = [ln.strip() for ln in (err + "\n" + out).splitlines() if ln.strip() and "] " not in ln[:30]]
    for i, ln in enumerate(lines):
        low = ln.lower()
        if "error" in low or "fail" in low or "cannot" in low or "refus" in low:
            if ln.endswith(":") and i + 1 < len(lines):  # what it names is on the next line
                ln = f"{ln} {lines[i + 1]}"
            return ln[:300]
    return (lines[-1] if lines else f"exit {rc}")[:300]


def _source_args(zm: ZooModel, model_arg: str) -> List[str]:
    """MODEL and the flags every command of the row gets: a built-in's --config, a
    team's --import; never --input-shape (the model's open dims are bridge's to sample)."""
    args = [model_arg] + [a for kv in BUILTIN_CONFIG.get(zm.name, []) for a in ("--config", kv)]
    return args + [a for f in zm.imports for a in ("--import", f)]


FUSE = "fuse"   # a road of its own (--roads fuse): the export's fusing step only, its counts recorded


def run_model(zm: ZooModel, size: int, work: str, repeat: int = 20, roads=ROADS) -> Row:
    t_start = time.perf_counter()
    exported_at = ""
    size = max(size, zm.min_size)
    row = Row(zm.name, zm.family, size=str(size))
    import keras
    keras.utils.set_random_seed(0)  # the same random weights every run: a row means the same model each time
    from bridge import modelsource
    try:
        built = zm.build(size)  # a built-in: its name (bridge builds it itself, as the commands do, from --config)
        args = _source_args(zm, built if isinstance(built, str) else "")
        if not isinstance(built, str):
            calibrate(built, calibration_feeds(modelsource.from_object(built)))
            path = os.path.join(work, f"{zm.name}.keras")
            built.save(path)
            if zm.saved:  # the same calibrated model as its team serves it
                path = os.path.join(work, f"{zm.name}.savedmodel")
                exported_at = _export(built, path)
            args[0] = path
        src = modelsource.resolve(args[0], config=_config_dict(zm.name))  # the model as the commands see it
    except Exception as e:
        row.built = f"not built: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return row
    feeds = [src.sample_inputs(seed=0)]  # parity's input
    row.size = ",".join("x".join("?" if d is None else str(d) for d in i.shape) for i in src.inputs)
    if any(d is None for i in src.inputs for d in i.shape[1:]):
        row.sample = ",".join("x".join(map(str, s)) for s in src.concrete_shapes().values()) + \
            f" ({src.sample.origin})"
    if FUSE in roads:
        _fuse_only(row, src)
        row.fusion_notes += [exported_at] if exported_at else []
        row.seconds = time.perf_counter() - t_start
        return row

    # bridge export --to onnx (custom): the timed export, the file the speed run uses
    onnx_path = os.path.join(work, f"{zm.name}.onnx")
    t0 = time.perf_counter()
    rc, out, err = _cli(["export", *args, "--to", "onnx", "-o", onnx_path, "--json"])
    row.export_s = time.perf_counter() - t0
    row.roads["onnx"] = _verdict(rc, out, err)
    if rc in (0, 1) and out.strip().startswith("{"):
        fusion = json.loads(out).get("details", {}).get("fusion")
        if isinstance(fusion, str):
            try:
                fusion = json.loads(fusion)
            except ValueError:
                fusion = None
        if isinstance(fusion, dict):
            _read_fusion(row, fusion)
    for road, extra in (("lowered", ["--to", "onnx", "--mode", "lowered"]), ("tflite", ["--to", "tflite"]),
                        ("ge", ["--to", "ge"])):
        if road not in roads:
            continue
        dst = os.path.join(work, f"{zm.name}-{road}" + (".onnx" if road == "lowered" else
                                                          ".tflite" if road == "tflite" else ""))
        # without --opset each exporter picks the lowest opset the model needs itself (at_lowest_opset)
        rc, out, err = _cli(["export", *args, *extra, "-o", dst, "--json"])
        row.roads[road] = _verdict(rc, out, err)
    report = os.path.join(work, f"{zm.name}-parity.json")
    rc, out, err = _cli(["parity", *args, "-q", "--json", report]) if "parity" in roads else (0, "", "")
    if "parity" not in roads:
        pass
    elif os.path.isfile(report):
        data = json.load(open(report))
        row.roads["parity"] = _parity_verdict(data)
        for r in data.get("runtimes", []):
            errs = [o["max_abs_error"] for o in r.get("outputs", {}).values() if o.get("max_abs_error") is not None]
            if errs and r["status"] != "reference":
                row.errors[r["name"]] = float(max(errs))
            elif errs:  # the float64 run: TF float32's own distance from it
                row.tf_vs_float64 = float(max(errs))
    else:
        row.roads["parity"] = _why(rc, out, err)

    _plain_tf2onnx(row, src, onnx_path, feeds[0], repeat)
    row.seconds = time.perf_counter() - t_start
    return row


def _export(model, path: str) -> str:
    """`model.export(path)`: its dims left open as Keras leaves them; where the
    model cannot be traced so (keras_hub's RWKV7 loops over its length in
    Python: "'SymbolicTensor' object cannot be interpreted as an integer"), at
    bridge's sample of them, the batch still open, as its team would serve it;
    then what it was fixed at ("" when nothing was)."""
    try:
        model.export(path, verbose=False)
        return ""
    except Exception as e:  # noqa: BLE001 - any trace failure: once more at fixed dims
        first = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
    import tensorflow as tf
    from bridge import modelsource
    src = modelsource.from_object(model)
    shapes = src.concrete_shapes()
    specs = [tf.TensorSpec((None,) + tuple(shapes[i.name][1:]), i.dtype, name=i.name) for i in src.inputs]
    shutil.rmtree(path, ignore_errors=True)
    model.export(path, verbose=False, input_signature=[modelsource.keras_call_args(model, specs)])
    return (f"exported at fixed dims {', '.join(f'{k}{list(v[1:])}' for k, v in shapes.items())} (batch open): "
            f"model.export at open dims failed ({first})")


def _read_fusion(row: Row, fusion: dict) -> None:
    """The fused counts and near misses of a fusion report (FuseReport.to_dict)."""
    patterns = fusion.get("patterns", {})
    row.fused = {k: v["fused"] for k, v in patterns.items() if v["fused"]}
    row.skipped = {k: len(v["skipped"]) for k, v in patterns.items() if v["skipped"]}
    row.near_misses = {k: sorted({s["reason"][:160] for s in v["skipped"]})[:4] for k, v in patterns.items()
                       if v["skipped"]}
    row.fusion_notes = [n[:300] for n in fusion.get("notes", []) if "declares Keras patterns only" not in n]


def _fuse_only(row: Row, src) -> None:
    """The fuse road: the step every export starts with (shared_steps.model_to_export:
    the Keras rewriter for a .keras file, graph-level fusion for a SavedModel), run
    alone; its report's counts. No conversion, no verification: the cheap sweep
    that compares a SavedModel's fused counts with its .keras twin's."""
    from bridge.converters import shared_steps
    from bridge.exporting import Progress
    summary_lines, details = [], {}
    t0 = time.perf_counter()
    try:
        shared_steps.model_to_export(src, True, Progress(enabled=False), summary_lines, details)
    except Exception as e:
        row.roads[FUSE] = f"crash: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        return
    row.export_s = time.perf_counter() - t0
    fusion = details.get("fusion")
    fusion = json.loads(fusion) if isinstance(fusion, str) and fusion.startswith("{") else fusion
    if not isinstance(fusion, dict):
        row.roads[FUSE] = f"no fusion report: {' '.join(summary_lines)[:200]}"
        return
    _read_fusion(row, fusion)
    row.roads[FUSE] = "pass"


def _config_dict(name):
    from bridge.commands._options import parse_config  # the commands' own reading of --config
    return parse_config(BUILTIN_CONFIG.get(name, []))


NOT_VERIFIED = "not verified"


def _verdict(rc, out, err) -> str:
    """pass | ill-conditioned: why | not verified: why (exit 0, but no check ran) | why not."""
    if rc == 0:
        if not out.strip().startswith("{"):
            return f"{NOT_VERIFIED}: no --json report to read its checks from"
        data = json.loads(out)
        checks = data.get("checks") or []
        if not checks:
            return f"{NOT_VERIFIED}: {data.get('not_verified') or 'the exporter ran no checks'}"[:300]
        ill = [c for c in checks if c.get("status") == ILL]
        return f"{ILL}: {ill[0]['output']}: {ill[0]['note']}"[:240] if ill else "pass"
    if rc == 1 and out.strip().startswith("{"):
        data = json.loads(out)
        bad = [c for c in data.get("checks", []) if not c["passed"]]
        if bad:
            return f"differs: {bad[0]['output']} max error {bad[0]['max_abs_error']:.3g} > {bad[0]['allowed']:.3g}"
    return _why(rc, out, err)


def _parity_verdict(data) -> str:
    """pass | pass; not run: which runtimes (why the first) | ill-conditioned: which
    runtimes, why | why not (bridge parity's three verdicts; a run that passed with
    runtimes unavailable says which, so it is not mistaken for every road verified)."""
    if data.get("passed") and data.get("ill_conditioned"):
        notes = [o.get("note", "") for r in data.get("runtimes", []) if r["name"] in data["ill_conditioned"]
                 for o in r.get("outputs", {}).values() if o.get("status") == ILL]
        return f"{ILL}: {', '.join(data['ill_conditioned'])}: " + (notes[0] if notes else "")[:240]
    if not data.get("passed"):
        return _parity_why(data)
    missing = [r for r in data.get("runtimes", []) if r.get("status") == "unavailable"]
    if missing:
        return (f"pass; not run: {', '.join(r['name'] for r in missing)} "
                f"({missing[0]['name']}: {missing[0].get('reason') or 'unavailable'})")[:300]
    return "pass"


def _parity_why(data) -> str:
    if data.get("problem"):
        return data["problem"][:300]
    bad = [r for r in data.get("runtimes", []) if not r.get("passed")]
    parts = []
    for r in bad[:3]:
        outs = [k for k, o in r.get("outputs", {}).items() if not o.get("passed")]
        parts.append(f"{r['name']}: " + (f"differs on {', '.join(outs)}" if outs else r.get("reason") or r["status"]))
    return "; ".join(parts)[:300]


@contextlib.contextmanager
def _without_bridge_handlers():
    """tf2onnx's handler registry as tf2onnx ships it: bridge's handlers for
    standard ops (converters/tf2onnx_standard.py) taken out for the plain run."""
    from tf2onnx.handler import tf_op
    from bridge.converters import tf2onnx_standard
    removed = []
    for domain, versions in tf_op.get_opsets().items():
        for handlers in versions:
            for name in tf2onnx_standard.HANDLES_STANDARD:
                if name in handlers:
                    removed.append((handlers, name, handlers.pop(name)))
    for (domain, version, name), own in tf2onnx_standard.REPLACED.items():  # tf2onnx's own, where bridge's
        tf_op.get_opsets()[domain][version][name] = own                       # replaced it
    try:
        yield
    finally:
        for handlers, name, h in removed:
            handlers[name] = h


def _plain_tf2onnx(row: Row, src, bridge_onnx: str, feeds, repeat: int) -> None:
    """The same (unfused) model through tf2onnx alone, and both exports timed on onnxruntime."""
    import logging
    import onnxruntime as ort
    import tf2onnx
    from bridge import onnx_plugins
    from bridge.converters import export_onnx
    from bridge.parity.verify import compare_outputs, float64_reference
    logging.getLogger("tf2onnx").setLevel(logging.CRITICAL)
    fn = src.function()
    ref = {k: np.asarray(v) for k, v in fn(*[feeds[i.name] for i in src.inputs]).items()}
    plain = None
    t0 = time.perf_counter()
    try:
        with _without_bridge_handlers(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            plain, _ = tf2onnx.convert.from_function(fn, input_signature=src.signature(), opset=18)
        row.plain_export_s = time.perf_counter() - t0
        bad = export_onnx.unsupported_nodes(plain, 18)
        if bad:
            row.plain = "leaves " + ", ".join(f"{k} x{len(v)}" for k, v in sorted(bad.items()))
            plain = None
    except Exception as e:
        row.plain = f"fails: {type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"
    sessions = {}
    # the same thread settings for both: bridge's session turns onnxruntime's spinning off only where
    # its oneDNN convolution runs (YoloConvBnLeaky nodes); small models pay for that in latency
    spin = "0" if _has_fused_conv(bridge_onnx) and onnx_plugins.library_has_onednn() else "1"
    if plain is not None:
        try:
            so = ort.SessionOptions()
            so.add_session_config_entry(onnx_plugins.SPINNING_KEY, spin)
            sess = ort.InferenceSession(plain.SerializeToString(), sess_options=so, providers=["CPUExecutionProvider"])
            got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            # judged as bridge's own export is (bridge export's check: the float64 rule included)
            checks = compare_outputs(got, ref, float64=float64_reference(src, feeds))
            if not all(c.passed for c in checks):
                row.plain = "converts, but differs from TensorFlow"
            elif any(c.status == ILL for c in checks):
                row.plain = f"converts ({ILL})"
            else:
                row.plain = "converts"
            sessions["plain"] = sess
        except Exception as e:
            row.plain = f"invalid model: {type(e).__name__}: {str(e).splitlines()[0][:150]}"
    if os.path.isfile(bridge_onnx):
        try:
            so = ort.SessionOptions()
            so.add_session_config_entry(onnx_plugins.SPINNING_KEY, spin)
            sessions["bridge"] = onnx_plugins.session(bridge_onnx, kernels="fastest", options=so)
        except Exception:
            pass
    if sessions:
        calls = {k: (lambda s=s: s.run(None, feeds)) for k, s in sessions.items()}
        medians, _ = alternating_medians(calls, repeat, warmup=2, budget_s=10)
        row.ort_ms = medians.get("bridge", None) and medians["bridge"] * 1e3
        row.plain_ort_ms = medians.get("plain", None) and medians["plain"] * 1e3


def _has_fused_conv(path: str) -> bool:
    import onnx
    if not os.path.isfile(path):
        return False
    return any(n.op_type == "YoloConvBnLeaky" for n in onnx.load(path, load_external_data=False).graph.node)


# -- the table ----------------------------------------------------------------------------------
SHORT = {"conv_bn_leaky": "CBL", "layer_norm": "LN", "yolo_decode": "decode", "zero_padding": "pad"}


def table(rows: List[Row]) -> str:
    from bridge.table import render
    headers = ["model", "input", "fused", "onnx", "lowered", "tflite", "ge", "parity", "max error (worst runtime)",
               "export s", "plain tf2onnx", "ort ms bridge", "ort ms plain"]
    body = []
    for r in rows:
        if r.built:
            body.append([r.model, r.size, "", _short(r.built, 60)] + [""] * 9)
            continue
        fused = " ".join(f"{SHORT.get(k, k)} {v}" for k, v in r.fused.items()) or "-"
        worst = max(r.errors.items(), key=lambda kv: kv[1]) if r.errors else None
        body.append([r.model, r.size, fused] + [_mark(r.roads.get(k, "")) for k in ROADS]
                    + [(f"{worst[1]:.2g} ({worst[0]})" if worst else "")
                       + (f", TF {r.tf_vs_float64:.2g} from f64" if r.tf_vs_float64 is not None else ""),
                       _num(r.export_s, 1), _short(r.plain or "", 44), _num(r.ort_ms, 2), _num(r.plain_ort_ms, 2)])
    return render(headers, body, align="lllllllllrlrr")


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 3] + "..."  # the whole line is under "why not"


def _mark(v: str) -> str:
    if v.startswith(ILL):
        return "ill"
    if v.startswith(NOT_VERIFIED):
        return "unverified"
    return ("ok" if v == "pass" else "ok*") if v.startswith("pass") else ("FAIL" if v else "")


def _num(v, digits):
    return "" if v is None else f"{v:.{digits}f}"


def summary(rows: List[Row]) -> str:
    built = [r for r in rows if not r.built]
    lines = [f"{len(built)}/{len(rows)} models built"]
    for road in ROADS + (FUSE,):
        ran = [r for r in built if road in r.roads]
        if ran:
            ill = sum(r.roads[road].startswith(ILL) for r in ran)
            lines.append(f"{road}: {sum(r.roads[road].startswith('pass') for r in ran)}/{len(ran)} pass"
                         + (f", {ill} ill-conditioned (float32 cannot resolve them; neither pass nor FAIL)"
                            if ill else ""))
    lines += _export_lines([r for r in built if "onnx" in r.roads])
    lines += saved_model_lines(built)
    fails = [(r.model, k, v) for r in built for k, v in r.roads.items() if v != "pass"]  # ok* says how
    fails += [(r.model, "plain tf2onnx", r.plain) for r in built if "onnx" in r.roads and r.plain != "converts"]
    fails += [(r.model, "build", r.built) for r in rows if r.built]
    if fails:
        lines.append("why not:")
        lines += [f"  {m} {k}: {v}" for m, k, v in fails]
    return "\n".join(lines)


def _export_lines(built: List[Row]) -> List[str]:
    """bridge's onnx export against plain tf2onnx (rows that ran the onnx road)."""
    if not built:
        return []
    lines = []
    plain_ok = sum(r.plain == "converts" for r in built)
    ill_bridge = sum(r.roads.get("onnx", "").startswith(ILL) for r in built)
    ill_plain = sum(r.plain == f"converts ({ILL})" for r in built)
    both = [r for r in built if r.ort_ms and r.plain_ort_ms]
    lines.append(f"bridge onnx export: {sum(r.roads.get('onnx', '').startswith('pass') for r in built)}/{len(built)} "
                 f"convert and verify" + (f" ({ill_bridge} more ill-conditioned)" if ill_bridge else "")
                 + f"; plain tf2onnx: {plain_ok}/{len(built)}" + (f" ({ill_plain} more ill-conditioned)" if ill_plain else ""))
    if both:
        ratio = np.exp(np.mean([np.log(r.plain_ort_ms / r.ort_ms) for r in both]))
        lines.append(f"onnxruntime, bridge's export vs plain tf2onnx (geometric mean over {len(both)} models): "
                     f"{ratio:.2f}x")
    return lines


def saved_model_lines(built: List[Row]) -> List[str]:
    """The SavedModel rows against their .keras twins (the same calibrated model,
    `model.export`): how many fuse what the .keras row fuses, and each that does
    not with both counts and why where no graph matcher is at fault (SAVED_DIFFERS)."""
    by_name = {r.model: r for r in built}
    pairs = [(r, by_name[r.model[:-len(SAVED_SUFFIX)]]) for r in built
             if r.model.endswith(SAVED_SUFFIX) and r.model[:-len(SAVED_SUFFIX)] in by_name]
    if not pairs:
        return []
    differ = [(s, k) for s, k in pairs if s.fused != k.fused]
    totals = {side: _counts({key: sum(r.fused.get(key, 0) for r in rows) for rows in [[p[i] for p in pairs]]
                             for key in {k for r in rows for k in r.fused}})
              for i, side in enumerate(("SavedModel", ".keras"))}
    lines = [f"SavedModel rows fusing what their .keras rows fuse: {len(pairs) - len(differ)}/{len(pairs)} "
             f"(in all: SavedModel {totals['SavedModel']}; .keras {totals['.keras']})"]
    for s, k in differ:
        lines.append(f"  {s.model}: {_counts(s.fused)} vs .keras {_counts(k.fused)} ({_why_differ(s, k)})")
    return lines


def _why_differ(saved: Row, keras_row: Row) -> str:
    """Why a SavedModel row fuses other counts than its .keras twin: SAVED_DIFFERS,
    else where the graph fuses more, the .keras road's own near misses of those
    patterns (a layer its rewriter cannot copy), else a graph matcher to fix."""
    why = SAVED_DIFFERS.get(keras_row.model)
    if why:
        return f"why: {why}"
    more = [key for key in saved.fused if saved.fused[key] > keras_row.fused.get(key, 0)]
    less = [key for key in keras_row.fused if keras_row.fused[key] > saved.fused.get(key, 0)]
    misses = [m for key in more for m in keras_row.near_misses.get(key, [])]
    if more and not less and misses:
        return f"the .keras road's limit: {misses[0][:150]}"
    graph = [m for key in less for m in saved.near_misses.get(key, [])] + saved.fusion_notes
    return "a matcher to fix" + (f": {graph[0][:150]}" if graph else "")


def _counts(fused: Dict[str, int]) -> str:
    return " ".join(f"{SHORT.get(k, k)} {v}" for k, v in sorted(fused.items())) or "nothing"


# .keras row -> why its SavedModel twin fuses other counts, where that is no graph matcher's fault and the
# .keras road's near misses do not say it: the graph cannot honestly be shown to compute the op there
SAVED_DIFFERS: Dict[str, str] = {
    "albert-hub": "ALBERT calls one shared transformer layer for both of its layers: the .keras road fuses each "
                  "LayerNormalization layer once (3: the embeddings' and the shared layer's 2), the graph has each "
                  "call as nodes of its own (5 = 1 + 2 x 2); every layer norm is fused on both roads",
    "debertav3-hub": "DeBERTa-v3 layer-normalises its relative-position table, a weight: frozen, that layer norm "
                     "reads only constants and is folded into one (no node runs it), the other 5 fuse on both roads",
    "segformer-hub": "keras_hub's SegFormer serves its linear_fuse BatchNormalization in training mode: "
                     "model.export's graph writes the moving statistics (AssignVariableOp) and a row's output "
                     "depends on its batch (0.99 apart alone and in a batch of 2), so it is no inference graph to "
                     "freeze and passes through unfused; the .keras road fuses its encoder's 4 layer norms",
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the small subset CI runs")
    p.add_argument("--only", help="comma-separated model names, run in this order")
    p.add_argument("--size", type=int, default=32, help="image input size (raised to each model's minimum)")
    p.add_argument("--repeat", type=int, default=20, help="timed onnxruntime rounds per model")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON ('-': stdout); a file is rewritten "
                                                  "after every model")
    p.add_argument("--table", metavar="FILE", help="print the table and summary of an earlier --json FILE")
    p.add_argument("--keep", metavar="DIR", help="keep the exported files in DIR")
    p.add_argument("--roads", default=",".join(ROADS),
                   help="which roads besides onnx (default all); parity alone also runs the lowered, TFLite and "
                        f"GE exports, as runtimes. '{FUSE}': only the fusing step every export starts with, its "
                        "counts recorded (no conversion, no verification: the SavedModel-vs-.keras count sweep)")
    p.add_argument("--budget-s", type=float, help="start no model after this many seconds (the rest: a row each)")
    p.add_argument("--one", help=argparse.SUPPRESS)  # the child process of one model (see _in_child)
    p.add_argument("--keep-files", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown_roads = sorted(set(args.roads.split(",")) - set(ROADS + (FUSE,)))
    if unknown_roads:
        p.error(f"unknown road(s) {unknown_roads}; known: {', '.join(ROADS + (FUSE,))}")
    if args.one:
        return _child(args)
    if args.table:
        rows = [Row(**r) for r in json.load(open(args.table))]
        print(table(rows) + "\n\n" + summary(rows))
        return 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    chosen = models()
    have_hub = _importable("keras_hub")
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {m.name for m in chosen})
        if unknown:
            p.error(f"unknown model(s) {unknown}; known: {', '.join(m.name for m in chosen)}")
        by_name = {m.name: m for m in chosen}
        chosen = [by_name[n] for n in dict.fromkeys(wanted)]  # in the order given
    elif args.quick:
        chosen = [m for m in chosen if m.quick]
    rows = []
    work = args.keep or tempfile.mkdtemp(prefix="bridge-zoo-")
    os.makedirs(work, exist_ok=True)
    try:
        start = time.perf_counter()
        for batch in _batches(chosen, args.roads.split(",")):
            todo = []
            for zm in batch:
                if args.budget_s is not None and time.perf_counter() - start > args.budget_s:
                    rows.append(Row(zm.name, zm.family, built=f"not run: --budget-s {args.budget_s:g} spent"))
                elif zm.family == "keras_hub" and not have_hub:
                    rows.append(Row(zm.name, zm.family, built="not built: keras-hub is not installed "
                                                              "(pip install -e '.[zoo]')"))
                else:
                    todo.append(zm)
            if not todo:
                continue
            print(f"zoo: {', '.join(zm.name for zm in todo)} ...", file=sys.stderr, flush=True)
            for row in _in_child(todo, args, work):
                print(f"zoo: {row.model} done in {row.seconds:.0f} s", file=sys.stderr, flush=True)
                rows.append(row)
            if args.json and args.json != "-":  # so far, after every model: a long sweep cut short keeps its rows
                _write_json(args.json, rows)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json == "-":
        print(json.dumps([asdict(r) for r in rows], indent=1))
    elif args.json:
        _write_json(args.json, rows)
    if args.json != "-":
        print(table(rows))
        print()
        print(summary(rows))
    return 0


FUSE_BATCH = 8   # models per child process on the fuse road (its start, TensorFlow's import, is most of a row)


def _batches(chosen: List[ZooModel], roads) -> List[List[ZooModel]]:
    """One model per child process; on the fuse road (no exports: little memory
    kept) up to FUSE_BATCH small ones share one, the HEAVY ones still alone."""
    if FUSE not in roads:
        return [[zm] for zm in chosen]
    out: List[List[ZooModel]] = []
    for zm in chosen:
        alone = zm.name.removesuffix(SAVED_SUFFIX) in HEAVY
        if alone or not out or len(out[-1]) >= FUSE_BATCH or out[-1][0].name.removesuffix(SAVED_SUFFIX) in HEAVY:
            out.append([zm])
        else:
            out[-1].append(zm)
    return out


def _in_child(batch: List[ZooModel], args, work: str) -> List[Row]:
    """Models in a fresh process: TensorFlow, tf2onnx and the runtimes keep
    memory across models (~9 GB after two large ones), and a native crash then
    costs its rows, not the sweep."""
    import subprocess
    out = os.path.join(work, f"{batch[0].name}.rows.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--one", ",".join(zm.name for zm in batch), "--size",
           str(args.size), "--repeat", str(args.repeat), "--keep", work, "--json", out, "--roads", args.roads] + \
        (["--keep-files"] if args.keep else [])
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rows = [Row(**r) for r in json.load(open(out))] if os.path.isfile(out) else []
    tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
    return rows + [Row(zm.name, zm.family, built=f"zoo error (exit {proc.returncode}): {tail[0][:200]}")
                   for zm in batch[len(rows):]]


def _child(args) -> int:
    from bridge.quiet import import_tensorflow
    import_tensorflow(verbose=False)
    by_name = {m.name: m for m in models()}
    rows = []
    for name in args.one.split(","):
        zm = by_name[name]
        try:
            row = run_model(zm, args.size, args.keep, args.repeat, args.roads.split(","))
        except Exception as e:  # the sweep's own failure on one model: a row, not the end of the sweep
            row = Row(zm.name, zm.family, built=f"zoo error: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        finally:
            if not args.keep_files:  # the exports of a large model are GBs: gone once measured
                for entry in os.listdir(args.keep):
                    if not entry.endswith(".rows.json") and (entry.startswith(f"{zm.name}.")
                                                             or entry.startswith(f"{zm.name}-")):
                        path = os.path.join(args.keep, entry)
                        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
        rows.append(row)
        _write_json(args.json, rows)  # after each: a native crash later keeps these
    return 0


def _write_json(path, rows) -> None:
    from bridge import atomic
    atomic.write_bytes(path, json.dumps([asdict(r) for r in rows], indent=1).encode())


def _importable(name) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None



if __name__ == "__main__":
    sys.exit(main())
