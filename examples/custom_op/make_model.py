"""Saves a small SavedModel that uses FusedBiasGelu (an MLP block: x W1 -> the
fused op -> W2), for `bridge export` and `bridge parity`:

    python examples/custom_op/make_model.py OUT_DIR [--library LIB.so]

Without --library, the op library is built from this folder into bridge's cache.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def build_module(tf, library, hidden: int = 48, width: int = 32, seed: int = 0):
    rng = np.random.default_rng(seed)

    class MlpBlock(tf.Module):
        def __init__(self):
            super().__init__()
            self.w1 = tf.Variable((rng.standard_normal((width, hidden)) / np.sqrt(width)).astype("float32"))
            self.b1 = tf.Variable((rng.standard_normal(hidden) * 0.1).astype("float32"))
            self.w2 = tf.Variable((rng.standard_normal((hidden, width)) / np.sqrt(hidden)).astype("float32"))

        @tf.function(input_signature=[tf.TensorSpec([None, None, width], tf.float32, name="tokens")])
        def __call__(self, tokens):
            h = tf.matmul(tokens, self.w1)
            h = library.fused_bias_gelu(h, self.b1)
            return {"features": tf.matmul(h, self.w2)}

    return MlpBlock()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--library", help="the built libfused_bias_gelu.so (default: build it into bridge's cache)")
    args = p.parse_args(argv)
    import tensorflow as tf
    from bridge import native
    lib_path = args.library or native.op_library_build(Path(__file__).resolve().parent).library()
    library = tf.load_op_library(str(lib_path))
    module = build_module(tf, library)
    tf.saved_model.save(module, args.out, signatures={"serving_default": module.__call__})
    print(f"saved {args.out} (op library {lib_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
