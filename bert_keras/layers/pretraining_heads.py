"""The pre-training heads of BERT: masked-LM over the tied word embeddings, and next sentence."""

import keras
import tensorflow as tf

from bert_keras.layers.activations import ACTIVATIONS


@keras.saving.register_keras_serializable(package="bert_keras")
class BertMaskedLMHead(keras.layers.Layer):
    """Dense H + activation + LayerNorm, then logits against the (tied) word-embedding table.

    Runs only on the masked positions' hidden states: [B, P, H] instead of [B, L, H]
    through the vocab-sized projection, which dominates the cost of small models.
    """

    def __init__(
        self,
        vocab_size,
        hidden_size,
        hidden_act="gelu",
        initializer_range=0.02,
        layer_norm_eps=1e-12,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {hidden_act!r} is not one of {sorted(ACTIVATIONS)}")
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.dense = keras.layers.Dense(
            hidden_size,
            activation=ACTIVATIONS[hidden_act],
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=self.dtype_policy,
            name="dense",
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_eps, dtype=self.dtype_policy, name="layer_norm"
        )

    def build(self, input_shape=None):
        self.dense.build((None, self.hidden_size))
        self.layer_norm.build((None, self.hidden_size))
        self.output_bias = self.add_weight(shape=(self.vocab_size,), initializer="zeros", name="output_bias")

    def call(self, masked_hidden, word_embeddings):
        """masked_hidden [B, P, H] (the encoder at the masked positions), word_embeddings [V, H]
        -> [B, P, V]."""
        # One [B*P, H] x [H, V] matmul: a batched [B, P, H] x [V, H] matmul would make the
        # table's gradient per batch row ([B, V, H]) and then sum it.
        rows = tf.reshape(masked_hidden, [-1, self.hidden_size])
        rows = self.layer_norm(self.dense(rows))
        table = tf.cast(word_embeddings, rows.dtype)
        logits = tf.nn.bias_add(tf.matmul(rows, table, transpose_b=True), tf.cast(self.output_bias, rows.dtype))
        return tf.reshape(logits, tf.concat([tf.shape(masked_hidden)[:2], [self.vocab_size]], 0))

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "hidden_act": self.hidden_act,
            "initializer_range": self.initializer_range,
            "layer_norm_eps": self.layer_norm_eps,
        }


@keras.saving.register_keras_serializable(package="bert_keras")
class BertNextSentenceHead(keras.layers.Layer):
    """Two logits (0 = B follows A, 1 = B is random) from the pooled output.

    The weight is [2, H] as in the original checkpoints, so it loads without transposing.
    """

    def __init__(self, hidden_size, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range

    def build(self, input_shape=None):
        self.output_weights = self.add_weight(
            shape=(2, self.hidden_size),
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range),
            name="output_weights",
        )
        self.output_bias = self.add_weight(shape=(2,), initializer="zeros", name="output_bias")

    def call(self, pooled_output):
        return tf.matmul(pooled_output, self.output_weights, transpose_b=True) + self.output_bias

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "initializer_range": self.initializer_range,
        }
