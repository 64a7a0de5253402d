"""Multiple choice (SWAG-style): one score per (context, choice) pair, softmax over choices."""

import keras
import tensorflow as tf

from bert_keras.checkpoint.weights import Transposed
from bert_keras.models.encoder import INPUT_NAMES
from bert_keras.tasks.preprocessing import is_packed
from bert_keras.tasks.serving_signature import ServingSignature, as_float32, check_no_labels
from bert_keras.tasks.task import BertTask, default_optimizer, output_layer


@keras.saving.register_keras_serializable(package="bert_keras")
class BertMultipleChoice(BertTask):
    """Each of the N choices is packed with its context; the pooled [CLS] vector of each
    goes through dropout and a new 1-unit dense layer, as in the paper's SWAG setup.

    Args:
        encoder: a `BertEncoder`.
        dropout: on the pooled vectors (0.1).
        preprocessor: optional `BertPreprocessor`; raw inputs are then `(contexts,
            choices)` with contexts strings `[B]` (or `[B, N]`) and choices `[B, N]`, or
            choices alone `[B, N]`.

    Call: packed dict of int `[B, N, L]` -> float32 logits `[B, N]` (softmax over N).
    """

    text_input_names = ("question", "choices")
    hf_architecture = "BertForMultipleChoice"
    head_kind = "multiple-choice"

    def __init__(self, encoder, dropout=0.1, preprocessor=None, **kwargs):
        super().__init__(encoder, preprocessor, **kwargs)
        self.dropout_rate = float(dropout)
        self.dropout = keras.layers.Dropout(dropout)
        self.score = output_layer(encoder, 1, "score")
        self.built = True

    def call(self, inputs, training=None):
        if not is_packed(inputs) or len(inputs["input_word_ids"].shape) != 3:
            raise ValueError(
                f"BertMultipleChoice is called on the packed dict {list(INPUT_NAMES)} shaped [batch, choices, "
                "seq]; for raw text use fit/evaluate/predict"
            )
        shape = tf.shape(inputs["input_word_ids"])
        flat = {name: tf.reshape(inputs[name], [-1, shape[2]]) for name in INPUT_NAMES}
        pooled = self._encode(flat, training)["pooled_output"]
        scores = self.score(self.dropout(pooled, training=training))
        return tf.reshape(scores, shape[:2])

    def preprocess_samples(self, x, y=None, sample_weight=None):
        segments = tuple(x) if isinstance(x, (tuple, list)) else (x,)
        return keras.utils.pack_x_y_sample_weight(pack_choices(self.preprocessor, segments), y, sample_weight)

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        """Defaults: AdamW 5e-5, cross-entropy over the choices, accuracy."""
        if optimizer == "auto":
            optimizer = default_optimizer()
        if loss == "auto":
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        if metrics == "auto":
            metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout_rate}

    def serving_signature(self, preprocessor, labels=None):
        """Served: one score per choice, their softmax, and the chosen index (`MultipleChoiceSignature`)."""
        check_no_labels(self, labels)
        return MultipleChoiceSignature(self, preprocessor)

    def head_weight_map(self):
        """`output_weights` [1, H] and `output_bias`, as run_classifier's (HF's `classifier`)."""
        return [(Transposed(self.score.kernel), ["output_weights"]), (self.score.bias, ["output_bias"])]

    @classmethod
    def head_arguments(cls, weights, head):
        """A BertForMultipleChoice's head, or a TF1 checkpoint's one-unit `output_weights`."""
        scores = weights.get("output_weights")
        if scores is None or scores.shape[0] != 1 or head["architecture"] not in (None, cls.hf_architecture):
            return None
        return {}


def pack_choices(preprocessor, segments):
    """Strings -> packed `[B, N, L]`: the last segment is the choices `[B, N]`; earlier ones
    (the context, e.g. a question) are `[B]`, repeated for each choice, or `[B, N]`."""
    choices = tf.convert_to_tensor(segments[-1])
    if choices.shape.rank != 2:
        raise ValueError(f"choices must be strings [batch, choices], got shape {choices.shape}")
    num_choices = tf.shape(choices)[1]
    flat = []
    for segment in segments:
        segment = tf.convert_to_tensor(segment)
        if segment.shape.rank == 1:
            segment = tf.repeat(segment[:, tf.newaxis], num_choices, axis=1)
        flat.append(tf.reshape(segment, [-1]))
    packed = preprocessor(tuple(flat))
    return {name: tf.reshape(t, [-1, num_choices, tf.shape(t)[1]]) for name, t in packed.items()}


class MultipleChoiceSignature(ServingSignature):
    """Request: `question` strings `[batch]` and `choices` strings `[batch, num_choices]`
    (every row the same number of choices; TF Serving's REST row format sends each
    instance as `{"question": "...", "choices": ["...", "..."]}`). With one segment it
    holds the choices alone. Outputs: `scores` `[batch, num_choices]` (the logits),
    `probabilities` (their softmax) and `choice` `[batch]`, the index of the best.
    `serve_ids` takes the packed ids shaped `[batch, num_choices, seq]`."""

    micro_batching = False  # rows are [batch, choices, seq]
    serves_word_pieces = False

    def text_inputs(self, segments):
        *contexts, choices = segments
        return [tf.TensorSpec([None], tf.string, name=name) for name in contexts] + [
            tf.TensorSpec([None, None], tf.string, name=choices)
        ]

    def ids_inputs(self):
        return [tf.TensorSpec([None, None, None], tf.int32, name=name) for name in INPUT_NAMES]

    def warmup_inputs(self, segments, texts):
        *contexts, choices = segments
        return {**{name: list(texts) for name in contexts}, choices: [list(texts)] * len(texts)}

    def from_text(self, texts, run):
        return self.from_ids(pack_choices(self.preprocessor, tuple(texts)), run)

    def from_ids(self, packed, run):
        scores = as_float32(run(packed))
        return {
            "scores": scores,
            "probabilities": tf.nn.softmax(scores),
            "choice": tf.argmax(scores, axis=-1, output_type=tf.int32),
        }
