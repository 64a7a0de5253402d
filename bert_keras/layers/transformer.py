"""One post-LayerNorm Transformer encoder block, as in BERT (Vaswani et al. 2017)."""

import math

import keras
import tensorflow as tf

from bert_keras.compat import keep_input_dtype
from bert_keras.layers.activations import ACTIVATIONS
from bert_keras.layers.dropout import PhiloxDropout
from bert_keras.layers.layer_norm import FusedLayerNorm


@keras.saving.register_keras_serializable(package="bert_keras")
class TransformerEncoderBlock(keras.layers.Layer):
    """Self-attention, then a feed-forward network, each followed by residual + LayerNorm.

    Query, key and value are one fused [H, 3H] projection (a single large matmul is
    faster on every device than three); checkpoint conversion splits and joins it.
    Matmuls run on [batch * seq, features] matrices, in the compute dtype. The residual
    stream, LayerNorm and softmax stay float32 under any policy: rounding the stream to
    bfloat16's 8-bit mantissa at every layer is what costs low precision its accuracy,
    and float32 softmax keeps masked positions at exactly zero weight. Biases go through
    `bias_add`, which oneDNN fuses into the matmul (with the GELU or the residual add).
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
                f"hidden_size ({hidden_size}) must be divisible by num_attention_heads ({num_attention_heads})"
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
        self.attention_layer_norm = FusedLayerNorm(epsilon=layer_norm_eps, dtype="float32", name="attention_layer_norm")
        self.output_layer_norm = FusedLayerNorm(epsilon=layer_norm_eps, dtype="float32", name="output_layer_norm")
        keep_input_dtype(self)  # keep the float32 stream: no autocast of inputs
        self.attention_dropout = PhiloxDropout(attention_probs_dropout_prob, dtype=self.dtype_policy)
        self.hidden_dropout = PhiloxDropout(hidden_dropout_prob, dtype=self.dtype_policy)

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
        self.attention_output_kernel, self.attention_output_bias = dense("attention_output", hidden, hidden)
        self.intermediate_kernel, self.intermediate_bias = dense("intermediate", hidden, intermediate)
        self.output_kernel, self.output_bias = dense("output", intermediate, hidden)
        self.attention_layer_norm.build((None, hidden))
        self.output_layer_norm.build((None, hidden))

    def call(self, hidden_states, attention_bias, training=None, return_attention_probs=False, query_positions=None):
        """hidden_states [B, L, H]; attention_bias float32 [B, 1, 1, L] (or [B, 1, L, L]
        for packed rows) from `attention_bias`.

        `query_positions` int [B, Q]: compute the block's output only at these positions
        (they still attend to all L), giving [B, Q, H]. Pre-training needs the last layer
        only where its heads read it, which saves most of that layer's work.
        """
        batch, seq_length = tf.shape(hidden_states)[0], tf.shape(hidden_states)[1]
        heads, head_size, hidden = self.num_attention_heads, self.head_size, self.hidden_size
        dtype = self.compute_dtype
        rows = tf.cast(tf.reshape(hidden_states, [-1, hidden]), tf.float32)

        def project_heads(rows, length, kernel, bias):
            """[rows, H] -> one [B, heads, length, head_size] tensor per H-wide slice of `kernel`."""
            count = kernel.shape[-1] // hidden
            projected = tf.nn.bias_add(tf.matmul(tf.cast(rows, dtype), kernel), bias)
            projected = tf.reshape(projected, [batch, length, count, heads, head_size])
            # unstack's gradient is one stack, not `count` pads
            return tf.unstack(tf.transpose(projected, [2, 0, 3, 1, 4]), axis=0)

        if query_positions is None:
            query_length = seq_length
            query, key, value = project_heads(rows, seq_length, self.qkv_kernel, self.qkv_bias)
        else:
            query_length = tf.shape(query_positions)[1]
            key, value = project_heads(rows, seq_length, self.qkv_kernel[:, hidden:], self.qkv_bias[hidden:])
            rows = tf.reshape(
                tf.gather(tf.cast(hidden_states, tf.float32), tf.cast(query_positions, tf.int32), batch_dims=1),
                [-1, hidden],
            )
            (query,) = project_heads(rows, query_length, self.qkv_kernel[:, :hidden], self.qkv_bias[:hidden])
            if attention_bias.shape[2] != 1:  # one bias row per query: keep the queried rows
                attention_bias = tf.gather(attention_bias, tf.cast(query_positions, tf.int32), axis=2, batch_dims=1)
        query *= 1.0 / math.sqrt(head_size)
        scores = tf.cast(tf.matmul(query, key, transpose_b=True), tf.float32) + tf.cast(attention_bias, tf.float32)
        probs = tf.nn.softmax(scores, axis=-1)
        context = tf.matmul(self.attention_dropout(tf.cast(probs, dtype), training=training), value)
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, hidden])

        attention = tf.nn.bias_add(tf.matmul(context, self.attention_output_kernel), self.attention_output_bias)
        attention = self.attention_layer_norm(
            tf.cast(self.hidden_dropout(attention, training=training), tf.float32) + rows, training=training
        )
        intermediate = self.activation(
            tf.nn.bias_add(tf.matmul(tf.cast(attention, dtype), self.intermediate_kernel), self.intermediate_bias)
        )
        output = tf.nn.bias_add(tf.matmul(intermediate, self.output_kernel), self.output_bias)
        output = self.output_layer_norm(
            tf.cast(self.hidden_dropout(output, training=training), tf.float32) + attention, training=training
        )
        output = tf.reshape(output, [batch, query_length, hidden])
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
