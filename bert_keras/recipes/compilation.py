"""XLA by default: the recipes compile the train step with XLA (`jit_compile`) where it
runs, since on CPU it is faster for the heads that can take it (bench/bench_jit.py)
while Keras' own "auto" leaves XLA off on CPU-only machines."""

import tensorflow as tf


def resolve_jit_compile(model, jit_compile="auto"):
    """`jit_compile` as given, or for "auto": XLA unless `model` reads texts in windows,
    whose count depends on the data (XLA compiles fixed shapes), or a `tf.distribute`
    strategy is in effect (there Keras' "auto" decides, as for any Keras model)."""
    if jit_compile != "auto":
        return jit_compile
    if getattr(model, "doc_stride", None) is not None:
        return False
    return "auto" if tf.distribute.has_strategy() else True
