"""One post-LayerNorm Transformer encoder block, as in BERT (Vaswani et al. 2017)."""

import math

import keras
import tensorflow as tf

ACTIVATIONS = {
    "gelu": lambda x: tf.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: tf.nn.gelu(x, approximate=True),
    "relu": tf.nn.relu,
    "tanh": tf.math.tanh,
}


def attention_bias(input_mask):
    """[B, L] 0/1 padding mask -> float32 [B, 1, 1, L] bias added to attention scores."""
    keep = tf.cast(input_mask, tf.float32)[:, None, None, :]
    return (1.0 - keep) * -1e9


@keras.saving.register_keras_serializable(package="bert_keras")
class TransformerEncoderBlock(keras.layers.Layer):
    """Self-attention, then a feed-forward network, each followed by residual + LayerNorm.

    Query, key and value are one fused [H, 3H] projection (a single large matmul is
    faster on every device than three); checkpoint conversion splits and joins it.
    Matmuls run on [batch * seq, features] matrices; softmax runs in float32 so
    mixed-precision training keeps masked positions at exactly zero weight.
    """

    def __init__(
        self,
        hidden_size,
        num_attention_heads,
        intermediate_size,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        initializer_range=0.02,
        layer_norm_eps=1e-12,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if hidden_size % num_attention_heads:
            raise ValueError(
                f"hidden_size ({hidden_size}) must be divisible by "
                f"num_attention_heads ({num_attention_heads})"
            )
        if hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {hidden_act!r} is not one of {sorted(ACTIVATIONS)}")
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.head_size = hidden_size // num_attention_heads
        self.activation = ACTIVATIONS[hidden_act]
        self.attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_eps, dtype=self.dtype_policy, name="attention_layer_norm"
        )
        self.output_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_eps, dtype=self.dtype_policy, name="output_layer_norm"
        )
        self.attention_dropout = keras.layers.Dropout(
            attention_probs_dropout_prob, dtype=self.dtype_policy
        )
        self.hidden_dropout = keras.layers.Dropout(hidden_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        hidden, intermediate = self.hidden_size, self.intermediate_size

        def dense(name, fan_in, fan_out):
            kernel = self.add_weight(
                shape=(fan_in, fan_out),
                initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range),
                name=f"{name}_kernel",
            )
            bias = self.add_weight(shape=(fan_out,), initializer="zeros", name=f"{name}_bias")
            return kernel, bias

        self.qkv_kernel, self.qkv_bias = dense("qkv", hidden, 3 * hidden)
        self.attention_output_kernel, self.attention_output_bias = dense(
            "attention_output", hidden, hidden
        )
        self.intermediate_kernel, self.intermediate_bias = dense(
            "intermediate", hidden, intermediate
        )
        self.output_kernel, self.output_bias = dense("output", intermediate, hidden)
        self.attention_layer_norm.build((None, hidden))
        self.output_layer_norm.build((None, hidden))

    def call(self, hidden_states, attention_bias, training=None, return_attention_probs=False):
        """hidden_states [B, L, H]; attention_bias float32 [B, 1, 1, L] from `attention_bias`."""
        batch, seq_length = tf.shape(hidden_states)[0], tf.shape(hidden_states)[1]
        heads, head_size = self.num_attention_heads, self.head_size
        rows = tf.reshape(hidden_states, [-1, self.hidden_size])

        qkv = tf.matmul(rows, self.qkv_kernel) + self.qkv_bias
        qkv = tf.transpose(tf.reshape(qkv, [batch, seq_length, 3, heads, head_size]), [2, 0, 3, 1, 4])
        query, key, value = tf.unstack(qkv, axis=0)  # unstack's gradient is one stack, not 3 pads
        query *= 1.0 / math.sqrt(head_size)
        # Keras casts float inputs to the compute dtype; the bias is added in float32.
        scores = tf.cast(tf.matmul(query, key, transpose_b=True), tf.float32) + tf.cast(
            attention_bias, tf.float32
        )
        probs = tf.nn.softmax(scores, axis=-1)
        context = tf.matmul(
            self.attention_dropout(tf.cast(probs, self.compute_dtype), training=training), value
        )
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, self.hidden_size])

        attention = tf.matmul(context, self.attention_output_kernel) + self.attention_output_bias
        attention = self.attention_layer_norm(
            self.hidden_dropout(attention, training=training) + rows
        )
        intermediate = self.activation(
            tf.matmul(attention, self.intermediate_kernel) + self.intermediate_bias
        )
        output = tf.matmul(intermediate, self.output_kernel) + self.output_bias
        output = self.output_layer_norm(self.hidden_dropout(output, training=training) + attention)
        output = tf.reshape(output, [batch, seq_length, self.hidden_size])
        if return_attention_probs:
            return output, probs
        return output

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "hidden_dropout_prob": self.hidden_dropout_prob,
            "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
            "initializer_range": self.initializer_range,
            "layer_norm_eps": self.layer_norm_eps,
        }
