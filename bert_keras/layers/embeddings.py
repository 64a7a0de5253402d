"""Token + segment + position embeddings, as BERT sums them before the first block."""

import keras
import tensorflow as tf

from bert_keras.layers.dropout import PhiloxDropout
from bert_keras.layers.layer_norm import FusedLayerNorm


@keras.saving.register_keras_serializable(package="bert_keras")
class BertEmbeddings(keras.layers.Layer):
    """Sums word, token-type and absolute position embeddings, then LayerNorm and dropout.

    The word table is exposed as `word_embeddings` so the masked-LM head can tie its
    output projection to it. Ids outside the tables raise an error instead of reading
    whatever memory `gather` would return on an accelerator. Tables, sum, LayerNorm and
    output are float32 under any policy: they start the encoder's float32 residual stream.

    `type_vocab_size=0` has no token-type table (DistilBERT): token type ids are then
    taken and ignored. `embedding_size` (ELECTRA) makes the tables that wide, projected to
    `hidden_size` after LayerNorm and dropout when the two differ.
    """

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        dropout_rate=0.1,
        initializer_range=0.02,
        layer_norm_eps=1e-12,
        embedding_size=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.embedding_size = embedding_size
        self.width = embedding_size or hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.layer_norm = FusedLayerNorm(epsilon=layer_norm_eps, dtype="float32", name="layer_norm")
        self.dropout = PhiloxDropout(dropout_rate, dtype="float32")
        self.projection = None
        if self.width != hidden_size:
            self.projection = keras.layers.Dense(
                hidden_size,
                kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
                dtype="float32",
                name="projection",
            )

    def build(self, input_shape=None):
        # float32 tables under any policy: a lookup costs the same in any dtype, and
        # bfloat16 tables would round every input of the encoder.
        initializer = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        table = dict(initializer=initializer, dtype="float32", autocast=False)
        self.word_embeddings = self.add_weight(shape=(self.vocab_size, self.width), name="word_embeddings", **table)
        self.token_type_embeddings = None
        if self.type_vocab_size:
            self.token_type_embeddings = self.add_weight(
                shape=(self.type_vocab_size, self.width), name="token_type_embeddings", **table
            )
        self.position_embeddings = self.add_weight(
            shape=(self.max_position_embeddings, self.width), name="position_embeddings", **table
        )
        self.layer_norm.build((None, None, self.width))
        if self.projection is not None:
            self.projection.build((None, None, self.width))

    def call(self, input_word_ids, input_type_ids, training=None, position_ids=None):
        """`position_ids` int [B, L]: each token's position (default 0..L-1), for rows
        that pack several sequences."""
        seq_length = tf.shape(input_word_ids)[1]
        with_types = self.token_type_embeddings is not None
        checks = [
            *check_id_range(input_word_ids, self.vocab_size, "input_word_ids", "vocab_size"),
            *(
                check_id_range(input_type_ids, self.type_vocab_size, "input_type_ids", "type_vocab_size")
                if with_types
                else ()
            ),
            tf.debugging.assert_less_equal(
                seq_length,
                self.max_position_embeddings,
                message=f"sequence length exceeds max_position_embeddings={self.max_position_embeddings}",
            ),
        ]
        # The lookups wait for the checks, so a bad id fails with the check's message.
        with tf.control_dependencies(checks):
            input_word_ids = tf.identity(input_word_ids)
            input_type_ids = tf.identity(input_type_ids)
        embeddings = tf.gather(self.word_embeddings, input_word_ids) + (
            self.position_embeddings[None, :seq_length]
            if position_ids is None
            else tf.gather(self.position_embeddings, position_ids)
        )
        if with_types:
            embeddings += tf.gather(self.token_type_embeddings, input_type_ids)
        embeddings = self.dropout(self.layer_norm(embeddings, training=training), training=training)
        return embeddings if self.projection is None else self.projection(embeddings)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.hidden_size)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "dropout_rate": self.dropout_rate,
            "initializer_range": self.initializer_range,
            "layer_norm_eps": self.layer_norm_eps,
            "embedding_size": self.embedding_size,
        }


def check_id_range(ids, size, name, size_name):
    """Assertions 0 <= ids < size (compiled away under XLA, where they cannot run)."""
    return [
        tf.debugging.assert_non_negative(ids, message=f"{name} has negative ids"),
        tf.debugging.assert_less(ids, tf.cast(size, ids.dtype), message=f"{name} has ids >= {size_name}={size}"),
    ]
