"""Dropout with its mask drawn by an explicitly named random algorithm."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="bert_keras")
class PhiloxDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with its mask drawn by the Philox algorithm, named explicitly.

    Keras leaves the algorithm to TensorFlow ("auto_select"), which XLA on CPU lowers
    to a generic RngBitGenerator expansion about 100x slower than its Philox kernel:
    each hidden-size mask cost more than a Transformer block's matmuls under
    `jit_compile`. Random bits are most of dropout's cost on CPU, so each 32-bit
    Philox word gives two 16-bit draws: the drop rate is exact to 2^-16 (0.1 ->
    0.100006). Same per-layer `SeedGenerator` as Keras.
    """

    def __init__(self, rate, **kwargs):
        if kwargs.get("noise_shape") is not None:
            raise ValueError("PhiloxDropout draws one mask value per element; noise_shape is not supported")
        if not 0 <= rate < 1:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        super().__init__(rate, **kwargs)

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        # As Keras' TensorFlow backend: stateless ops take an int32 seed.
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
        size = tf.size(inputs)
        words = tf.random.stateless_uniform(
            [(size + 1) // 2], seed, minval=None, maxval=None, dtype=tf.uint32, alg="philox"
        )
        draws = tf.concat([tf.bitwise.bitwise_and(words, 0xFFFF), tf.bitwise.right_shift(words, 16)], 0)
        keep = tf.reshape(draws[:size], tf.shape(inputs)) >= round(self.rate * 65536)
        return inputs * tf.cast(keep, inputs.dtype) * tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
