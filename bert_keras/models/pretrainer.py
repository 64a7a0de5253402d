"""BERT pre-training: the masked-LM and next-sentence heads on an encoder, trained by `fit`."""

import keras
import tensorflow as tf

from bert_keras.encoder import INPUT_NAMES, BertEncoder
from bert_keras.layers.transformer import ACTIVATIONS

LABEL_NAMES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


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
        self.output_bias = self.add_weight(
            shape=(self.vocab_size,), initializer="zeros", name="output_bias"
        )

    def call(self, masked_hidden, word_embeddings):
        """masked_hidden [B, P, H] (the encoder at the masked positions), word_embeddings [V, H]
        -> [B, P, V]."""
        # One [B*P, H] x [H, V] matmul: a batched [B, P, H] x [V, H] matmul would make the
        # table's gradient per batch row ([B, V, H]) and then sum it.
        rows = tf.reshape(masked_hidden, [-1, self.hidden_size])
        rows = self.layer_norm(self.dense(rows))
        table = tf.cast(word_embeddings, rows.dtype)
        logits = tf.nn.bias_add(
            tf.matmul(rows, table, transpose_b=True), tf.cast(self.output_bias, rows.dtype)
        )
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


@keras.saving.register_keras_serializable(package="bert_keras")
class BertPretrainer(keras.Model):
    """A `BertEncoder` with the masked-LM and next-sentence-prediction heads.

    Call on the feature dict of `bert_keras.pretraining_data` (`input_word_ids`,
    `input_mask`, `input_type_ids`, `masked_lm_positions` [B, P], and for training
    `masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels`) -> `mlm_logits`
    [B, P, V] and `nsp_logits` [B, 2]. The labels travel inside the dict, so
    `compile(optimizer)` and `fit(dataset)` are enough: the loss is the original's
    (masked-LM cross-entropy weighted by `masked_lm_weights` and averaged over real
    predictions, plus next-sentence cross-entropy) and `fit` reports both losses and
    both accuracies.
    """

    def __init__(self, encoder, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(encoder, BertEncoder):
            raise TypeError(f"encoder must be a BertEncoder, got {type(encoder).__name__}")
        config = encoder.config
        self.encoder = encoder
        self.masked_lm_head = BertMaskedLMHead(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            hidden_act=config.hidden_act,
            initializer_range=config.initializer_range,
            layer_norm_eps=config.layer_norm_eps,
            dtype=self.dtype_policy,
            name="masked_lm_head",
        )
        self.next_sentence_head = BertNextSentenceHead(
            config.hidden_size,
            initializer_range=config.initializer_range,
            dtype=self.dtype_policy,
            name="next_sentence_head",
        )
        self.masked_lm_head.build()
        self.next_sentence_head.build()
        self.built = True
        self.masked_lm_loss = keras.metrics.Mean(name="masked_lm_loss")
        self.next_sentence_loss = keras.metrics.Mean(name="next_sentence_loss")
        self.masked_lm_accuracy = keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy")
        self.next_sentence_accuracy = keras.metrics.SparseCategoricalAccuracy(
            name="next_sentence_accuracy"
        )

    @property
    def config(self):
        return self.encoder.config

    def call(self, inputs, training=None):
        if not isinstance(inputs, dict) or "masked_lm_positions" not in inputs:
            got = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
            raise ValueError(
                f"BertPretrainer takes a dict with {list(INPUT_NAMES)} and masked_lm_positions; got {got}"
            )
        # The last layer runs only at the masked positions and [CLS]: the heads read nothing else.
        outputs = self.encoder(
            {name: inputs[name] for name in INPUT_NAMES},
            training=training,
            output_positions=inputs["masked_lm_positions"],
        )
        mlm_logits = self.masked_lm_head(outputs["sequence_output"], self.encoder.embeddings.word_embeddings)
        nsp_logits = self.next_sentence_head(outputs["pooled_output"])
        return {"mlm_logits": mlm_logits, "nsp_logits": nsp_logits}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        missing = [name for name in LABEL_NAMES if name not in x]
        if missing:
            raise ValueError(f"BertPretrainer training data is missing {missing}")
        mlm_logits = tf.cast(y_pred["mlm_logits"], tf.float32)
        nsp_logits = tf.cast(y_pred["nsp_logits"], tf.float32)
        weights = tf.cast(x["masked_lm_weights"], tf.float32)
        per_prediction = tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.cast(x["masked_lm_ids"], tf.int32), mlm_logits
        )
        # As the original: sum(w * loss) / (sum(w) + 1e-5), so padded predictions count 0.
        mlm_sum = tf.reduce_sum(weights * per_prediction)
        mlm_count = tf.reduce_sum(weights)
        nsp_loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(
                tf.reshape(tf.cast(x["next_sentence_labels"], tf.int32), [-1]), nsp_logits
            )
        )
        loss = nsp_loss
        if self.losses:
            loss = loss + tf.add_n([tf.cast(extra, tf.float32) for extra in self.losses])
        # Keras sums replica gradients, so each replica contributes its share of the
        # global batch's loss: the masked-LM sums are over the whole global batch.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        context = tf.distribute.get_replica_context()
        if replicas > 1 and context is not None:
            global_sum, global_count = tf.unstack(
                context.all_reduce("sum", tf.stack([tf.stop_gradient(mlm_sum), mlm_count]))
            )
            mlm_loss = global_sum / (global_count + 1e-5)
            mlm_share = mlm_sum / (global_count + 1e-5)
            loss = loss / replicas
        else:
            mlm_loss = mlm_share = mlm_sum / (mlm_count + 1e-5)
        self.masked_lm_loss.update_state(mlm_loss)
        self.next_sentence_loss.update_state(nsp_loss)
        return mlm_share + loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        self.masked_lm_accuracy.update_state(
            x["masked_lm_ids"], tf.cast(y_pred["mlm_logits"], tf.float32), x["masked_lm_weights"]
        )
        self.next_sentence_accuracy.update_state(
            tf.reshape(x["next_sentence_labels"], [-1]), tf.cast(y_pred["nsp_logits"], tf.float32)
        )
        return self.get_metrics_result()

    def get_config(self):
        return {**super().get_config(), "encoder": keras.saving.serialize_keras_object(self.encoder)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)

    @classmethod
    def from_checkpoint(cls, path, format=None, config=None):
        """Loads encoder + heads from an original TF1 checkpoint, an HF BertForPreTraining
        folder or a `.keras` file. A checkpoint without `cls/` heads is an error naming them."""
        from bert_keras import checkpoint

        format = format or checkpoint.detect_format(path)
        if format == "keras":
            model = keras.saving.load_model(path)
            if not isinstance(model, cls):
                raise ValueError(f"{path} holds a {type(model).__name__}, not a {cls.__name__}")
            return model
        weights, found_config, vocab_path = checkpoint.read(path, format)
        pretrainer = cls(BertEncoder(config or found_config))
        checkpoint.set_original_weights(
            pretrainer_weight_map(pretrainer), weights, source=f"{format} checkpoint {path}"
        )
        pretrainer.encoder.vocab_path = vocab_path
        return pretrainer


def pretrainer_weight_map(pretrainer):
    """The encoder's weight map plus the original `cls/` names of the two heads."""
    from bert_keras.checkpoint import encoder_weight_map

    mlm, nsp = pretrainer.masked_lm_head, pretrainer.next_sentence_head
    return encoder_weight_map(pretrainer.encoder) + [
        (mlm.dense.kernel, ["cls/predictions/transform/dense/kernel"]),
        (mlm.dense.bias, ["cls/predictions/transform/dense/bias"]),
        (mlm.layer_norm.gamma, ["cls/predictions/transform/LayerNorm/gamma"]),
        (mlm.layer_norm.beta, ["cls/predictions/transform/LayerNorm/beta"]),
        (mlm.output_bias, ["cls/predictions/output_bias"]),
        (nsp.output_weights, ["cls/seq_relationship/output_weights"]),
        (nsp.output_bias, ["cls/seq_relationship/output_bias"]),
    ]


def save_pretrainer(pretrainer, path, format, vocab_path=None):
    """Writes encoder + heads as `.keras`, an HF BertForPreTraining folder or a TF1 checkpoint."""
    from bert_keras import checkpoint

    vocab_path = vocab_path or getattr(pretrainer.encoder, "vocab_path", None)
    if format == "keras":
        pretrainer.save(path)
        return
    if format not in checkpoint.WRITERS:
        raise ValueError(f"cannot write format {format!r}; use keras, hf or tf1")
    weights = checkpoint.get_original_weights(pretrainer_weight_map(pretrainer))
    checkpoint.WRITERS[format](weights, pretrainer.config, path, vocab_path)
