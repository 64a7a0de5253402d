"""BERT pre-training: the masked-LM and next-sentence heads on an encoder, trained by `fit`."""

import warnings

import keras
import tensorflow as tf

from bert_keras.checkpoint.reader import read_checkpoint
from bert_keras.checkpoint.weights import POOLER_NAMES, set_original_weights
from bert_keras.compat import BuildsBeforeTracing, WorksAroundKeras20585
from bert_keras.layers import BertMaskedLMHead, BertNextSentenceHead
from bert_keras.models.encoder import INPUT_NAMES, PACKING_INPUT, BertEncoder
from bert_keras.models.saving import load_checkpoint

LABEL_NAMES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


@keras.saving.register_keras_serializable(package="bert_keras")
class BertPretrainer(BuildsBeforeTracing, WorksAroundKeras20585, keras.Model):
    """A `BertEncoder` with the masked-LM and next-sentence-prediction heads.

    Call on the feature dict of `bert_keras.data.tfrecords` (`input_word_ids`,
    `input_mask`, `input_type_ids`, `masked_lm_positions` [B, P], and for training
    `masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels`) -> `mlm_logits`
    [B, P, V] and `nsp_logits` [B, 2]. The labels travel inside the dict, so
    `compile(optimizer)` and `fit(dataset)` are enough: the loss is the original's
    (masked-LM cross-entropy weighted by `masked_lm_weights` and averaged over real
    predictions, plus next-sentence cross-entropy) and `fit` reports both losses and
    both accuracies.

    `next_sentence=False` drops the next-sentence head and loss (the paper's "No NSP"
    ablation, RoBERTa's choice): masked LM only, on the same data (the next-sentence
    labels, if present, are ignored) and with checkpoints that hold no
    `cls/seq_relationship` weights.

    Packed rows (several instances in one row, no cross-attention between them; see
    `BertEncoder`) add `packed_sequence_ids` [B, L] and `next_sentence_positions` [B, K]
    (each instance's [CLS]), with `next_sentence_labels` and `next_sentence_weights`
    [B, K] (0 for unused slots): `nsp_logits` is then [B, K, 2], and the losses are
    those of the same instances unpacked (the next-sentence loss averaged over real
    instances of the global batch, as the masked-LM loss is over real predictions).

    `masked_lm_hidden_act` and `masked_lm_layer_norm_eps` are the masked-LM head's
    activation and LayerNorm epsilon where they are not the encoder's (None): keras-hub's
    `BertMaskedLM` computes exact GELU and epsilon 1e-5 on its tanh-GELU backbone.
    """

    # Read by its fill-mask export (`serving_tasks.FillMaskSignature`), as a task head's (`BertTask`).
    text_input_names = ("text",)
    token_output_names = ()
    head_kind = "fill-mask"

    def __init__(self, encoder, next_sentence=True, masked_lm_hidden_act=None, masked_lm_layer_norm_eps=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(encoder, BertEncoder):
            raise TypeError(f"encoder must be a BertEncoder, got {type(encoder).__name__}")
        config = encoder.config
        self.encoder = encoder
        self.masked_lm_hidden_act = masked_lm_hidden_act
        self.masked_lm_layer_norm_eps = masked_lm_layer_norm_eps
        self.masked_lm_head = BertMaskedLMHead(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            hidden_act=config.hidden_act if masked_lm_hidden_act is None else masked_lm_hidden_act,
            initializer_range=config.initializer_range,
            layer_norm_eps=config.layer_norm_eps if masked_lm_layer_norm_eps is None else masked_lm_layer_norm_eps,
            dtype=self.dtype_policy,
            name="masked_lm_head",
        )
        self.masked_lm_head.build()
        self.next_sentence = bool(next_sentence)
        self.next_sentence_head = None
        if self.next_sentence:
            self.next_sentence_head = BertNextSentenceHead(
                config.hidden_size,
                initializer_range=config.initializer_range,
                dtype=self.dtype_policy,
                name="next_sentence_head",
            )
            self.next_sentence_head.build()
        self.built = True
        self.masked_lm_loss = keras.metrics.Mean(name="masked_lm_loss")
        self.masked_lm_accuracy = keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy")
        if self.next_sentence:
            self.next_sentence_loss = keras.metrics.Mean(name="next_sentence_loss")
            self.next_sentence_accuracy = keras.metrics.SparseCategoricalAccuracy(name="next_sentence_accuracy")

    @property
    def config(self):
        return self.encoder.config

    def call(self, inputs, training=None):
        if not isinstance(inputs, dict) or "masked_lm_positions" not in inputs:
            got = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
            raise ValueError(f"BertPretrainer takes a dict with {list(INPUT_NAMES)} and masked_lm_positions; got {got}")
        packed = PACKING_INPUT in inputs
        positions = inputs["masked_lm_positions"]
        if packed and self.next_sentence:
            if "next_sentence_positions" not in inputs:
                raise ValueError(
                    "packed rows (packed_sequence_ids) need next_sentence_positions: each instance's [CLS]"
                )
            cls_positions = tf.cast(inputs["next_sentence_positions"], tf.int32)
            positions = tf.concat([cls_positions, tf.cast(positions, tf.int32)], axis=1)
        # The last layer runs only at the masked positions and [CLS]: the heads read nothing else.
        outputs = self.encoder(
            {name: inputs[name] for name in INPUT_NAMES + ((PACKING_INPUT,) if packed else ())},
            training=training,
            output_positions=positions,
        )
        hidden, pooled = outputs["sequence_output"], outputs["pooled_output"]
        if packed and self.next_sentence:  # the pooler at every instance's [CLS]
            count = tf.shape(cls_positions)[1]
            pooled, hidden = self.encoder.pooler.dense(hidden[:, :count]), hidden[:, count:]
        mlm_logits = self.masked_lm_head(hidden, self.encoder.embeddings.word_embeddings)
        if not self.next_sentence:
            return {"mlm_logits": mlm_logits}
        return {"mlm_logits": mlm_logits, "nsp_logits": self.next_sentence_head(pooled)}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        needed = LABEL_NAMES if self.next_sentence else LABEL_NAMES[:3]
        missing = [name for name in needed if name not in x]
        if missing:
            raise ValueError(f"BertPretrainer training data is missing {missing}")
        mlm_logits = tf.cast(y_pred["mlm_logits"], tf.float32)
        weights = tf.cast(x["masked_lm_weights"], tf.float32)
        per_prediction = tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.cast(x["masked_lm_ids"], tf.int32), mlm_logits
        )
        # As the original: sum(w * loss) / (sum(w) + 1e-5), so padded predictions count 0.
        mlm_sum = tf.reduce_sum(weights * per_prediction)
        mlm_count = tf.reduce_sum(weights)
        # Next-sentence: the mean over the instances (weighted: packed rows have empty slots).
        nsp_sum = nsp_count = tf.constant(0.0)
        if self.next_sentence:
            labels, weights = _next_sentence_labels(x)
            per_instance = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels, tf.reshape(tf.cast(y_pred["nsp_logits"], tf.float32), [-1, 2])
            )
            nsp_sum, nsp_count = tf.reduce_sum(weights * per_instance), tf.reduce_sum(weights)
        loss = tf.constant(0.0)
        if self.losses:
            loss = loss + tf.add_n([tf.cast(extra, tf.float32) for extra in self.losses])
        # Keras sums replica gradients, so each replica contributes its share of the
        # global batch's loss: the sums are over the whole global batch.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        context = tf.distribute.get_replica_context()
        if replicas > 1 and context is not None:
            totals = context.all_reduce(
                "sum", tf.stack([tf.stop_gradient(mlm_sum), mlm_count, tf.stop_gradient(nsp_sum), nsp_count])
            )
            global_mlm_sum, global_mlm_count, global_nsp_sum, global_nsp_count = tf.unstack(totals)
            mlm_loss = global_mlm_sum / (global_mlm_count + 1e-5)
            mlm_share = mlm_sum / (global_mlm_count + 1e-5)
            nsp_loss = global_nsp_sum / tf.maximum(global_nsp_count, 1.0)
            nsp_share = nsp_sum / tf.maximum(global_nsp_count, 1.0)
            loss = loss / replicas
        else:
            mlm_loss = mlm_share = mlm_sum / (mlm_count + 1e-5)
            nsp_loss = nsp_share = nsp_sum / tf.maximum(nsp_count, 1.0)
        self.masked_lm_loss.update_state(mlm_loss)
        if self.next_sentence:
            self.next_sentence_loss.update_state(nsp_loss)
        return mlm_share + nsp_share + loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        self.masked_lm_accuracy.update_state(
            x["masked_lm_ids"], tf.cast(y_pred["mlm_logits"], tf.float32), x["masked_lm_weights"]
        )
        if self.next_sentence:
            labels, weights = _next_sentence_labels(x)
            self.next_sentence_accuracy.update_state(
                labels, tf.reshape(tf.cast(y_pred["nsp_logits"], tf.float32), [-1, 2]), weights
            )
        return self.get_metrics_result()

    def get_config(self):
        return {
            **super().get_config(),
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "next_sentence": self.next_sentence,
            "masked_lm_hidden_act": self.masked_lm_hidden_act,
            "masked_lm_layer_norm_eps": self.masked_lm_layer_norm_eps,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)

    @property
    def vocab_path(self):
        return self.encoder.vocab_path

    @vocab_path.setter
    def vocab_path(self, path):
        self.encoder.vocab_path = path

    @classmethod
    def from_checkpoint(cls, path, format=None, config=None, new_heads=False, next_sentence=None, revision=None):
        """Loads encoder + heads from an original TF1 checkpoint, an HF BertForPreTraining
        folder or a `.keras` file. A checkpoint without `cls/` heads is an error naming
        them, unless `new_heads` (see `from_original_weights`). `next_sentence`: None
        keeps the checkpoint's heads; False leaves out (and ignores) a next-sentence head;
        True needs one (or `new_heads`). `path` may be a Hugging Face Hub name
        (`ORG/NAME[@REVISION]`; `revision` pins one). A keras-hub `BertMaskedLM` preset
        keeps its masked-LM head's activation and epsilon (`Checkpoint.head`'s `masked_lm`)."""
        found = read_checkpoint(path, format, revision=revision)
        model = load_checkpoint(
            cls,
            found,
            config=config,
            new_heads=new_heads,
            next_sentence=next_sentence,
            **found.head.get("masked_lm", {}),
        )
        if next_sentence is None or model.next_sentence == next_sentence:
            return model
        if next_sentence and not new_heads:  # a `.keras` model saved without one
            raise ValueError(f"{path} has no next-sentence head; pass new_heads=True to start one")
        converted = cls(
            model.encoder,
            next_sentence=next_sentence,
            masked_lm_hidden_act=model.masked_lm_hidden_act,
            masked_lm_layer_norm_eps=model.masked_lm_layer_norm_eps,
        )
        for mine, saved in zip(converted.masked_lm_head.weights, model.masked_lm_head.weights):
            mine.assign(saved)
        return converted

    @classmethod
    def from_original_weights(
        cls,
        weights,
        config,
        source="checkpoint",
        new_heads=False,
        next_sentence=None,
        masked_lm_hidden_act=None,
        masked_lm_layer_norm_eps=None,
    ):
        """A pre-training model with canonical `{original name: array}` weights.

        `new_heads=True` starts new heads on the encoder when the weights have no masked-LM
        head (an encoder-only release such as a sentence-embedding model), and a new
        next-sentence head when only that one is missing. `next_sentence` as in
        `from_checkpoint` (None: a next-sentence head when the weights have one); the
        masked-LM head's settings as in the constructor."""
        head_settings = {
            "masked_lm_hidden_act": masked_lm_hidden_act,
            "masked_lm_layer_norm_eps": masked_lm_layer_norm_eps,
        }
        has_nsp = any(name.startswith("cls/seq_relationship/") for name in weights)
        if new_heads and not any(name.startswith("cls/predictions/") for name in weights):
            warnings.warn(
                f"{source} has no masked-LM/next-sentence heads: starting new ones on its encoder", stacklevel=2
            )
            return cls(
                BertEncoder.from_original_weights(weights, config, source),
                next_sentence=next_sentence is not False,
                **head_settings,
            )
        if next_sentence is None:
            next_sentence = has_nsp
        pretrainer = cls(BertEncoder(config), next_sentence=next_sentence, **head_settings)
        weight_map = pretrainer.original_weight_map()
        if next_sentence and new_heads and not has_nsp:
            warnings.warn(f"{source} has no next-sentence head: starting a new one", stacklevel=2)
            weight_map = [
                (variable, names) for variable, names in weight_map if not names[0].startswith("cls/seq_relationship/")
            ]
        set_original_weights(
            weight_map,
            weights,
            source=source,
            ignore=None if next_sentence else "^cls/seq_relationship/",
            optional=POOLER_NAMES,
        )
        return pretrainer

    def checkpoint_head(self):
        """The heads as `checkpoint.write` records them: the class, and the masked-LM head's
        activation and epsilon, so that a format that cannot keep them says so."""
        return {
            "architecture": "BertForPreTraining" if self.next_sentence else "BertForMaskedLM",
            "masked_lm": {
                "masked_lm_hidden_act": self.masked_lm_head.hidden_act,
                "masked_lm_layer_norm_eps": self.masked_lm_head.layer_norm_eps,
            },
        }

    def original_weight_map(self):
        """The encoder's weight map plus the original `cls/` names of the heads."""
        mlm, nsp = self.masked_lm_head, self.next_sentence_head
        heads = [
            (mlm.dense.kernel, ["cls/predictions/transform/dense/kernel"]),
            (mlm.dense.bias, ["cls/predictions/transform/dense/bias"]),
            (mlm.layer_norm.gamma, ["cls/predictions/transform/LayerNorm/gamma"]),
            (mlm.layer_norm.beta, ["cls/predictions/transform/LayerNorm/beta"]),
            (mlm.output_bias, ["cls/predictions/output_bias"]),
        ]
        if nsp is not None:
            heads += [
                (nsp.output_weights, ["cls/seq_relationship/output_weights"]),
                (nsp.output_bias, ["cls/seq_relationship/output_bias"]),
            ]
        return self.encoder.original_weight_map() + heads


def _next_sentence_labels(x):
    """The next-sentence labels and weights, flat: [B] unpacked (weights 1), [B * K] packed."""
    labels = tf.reshape(tf.cast(x["next_sentence_labels"], tf.int32), [-1])
    weights = x.get("next_sentence_weights")
    weights = tf.ones_like(labels, tf.float32) if weights is None else tf.reshape(tf.cast(weights, tf.float32), [-1])
    return labels, weights
