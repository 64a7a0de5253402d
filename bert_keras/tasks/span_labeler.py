"""Extractive question answering (SQuAD): start and end logits for every token."""

import keras
import tensorflow as tf

from bert_keras.checkpoint.weights import Transposed
from bert_keras.tasks.serving_signature import ServingSignature, as_float32, check_no_labels
from bert_keras.tasks.task import BertTask, default_optimizer, output_layer

# Added to the logits of padding positions so that no answer can start or end there.
PADDING_LOGIT = -10000.0
MAX_ANSWER_TOKENS = 30  # the original run_squad's max_answer_length
NEG_INF = -1e9


@keras.saving.register_keras_serializable(package="bert_keras")
class BertSpanLabeler(BertTask):
    """Start/end logits per token from `sequence_output` through one new dense layer
    (2 units, stddev 0.02), as the original run_squad.

    No-answer (SQuAD v2.0) uses the original's convention: an unanswerable example is
    labelled start = end = 0, the [CLS] position, so the null score is
    `start_logits[:, 0] + end_logits[:, 0]`; no extra weights are needed.

    Args:
        encoder: a `BertEncoder`.
        preprocessor: optional `BertPreprocessor`; raw `(questions, contexts)` string
            pairs then work in predict (windowing of long contexts is the SQuAD
            pipeline's job).

    Call: packed dict of int `[B, L]` -> dict of float32 `start_logits` and
    `end_logits` `[B, L]`; padding positions get -10000.
    """

    text_input_names = ("question", "context")
    token_output_names = ("start_logits", "end_logits")
    hf_architecture = "BertForQuestionAnswering"
    head_kind = "span"

    def __init__(self, encoder, preprocessor=None, **kwargs):
        super().__init__(encoder, preprocessor, **kwargs)
        self.span_logits = output_layer(encoder, 2, "span_logits", per_token=True)
        self.built = True

    def call(self, inputs, training=None):
        sequence = self._encode(inputs, training)["sequence_output"]
        logits = self.span_logits(sequence)
        padding = tf.cast(1 - tf.cast(inputs["input_mask"], tf.int32), logits.dtype) * PADDING_LOGIT
        return {"start_logits": logits[..., 0] + padding, "end_logits": logits[..., 1] + padding}

    def compile(self, optimizer="auto", loss="auto", loss_weights="auto", **kwargs):
        """Defaults: AdamW 5e-5 and the original loss, the mean of the start and end
        cross-entropies; labels are `{"start_logits": [B], "end_logits": [B]}` positions."""
        if optimizer == "auto":
            optimizer = default_optimizer()
        if loss == "auto":
            loss = {
                name: keras.losses.SparseCategoricalCrossentropy(from_logits=True)
                for name in ("start_logits", "end_logits")
            }
        if loss_weights == "auto":
            loss_weights = {"start_logits": 0.5, "end_logits": 0.5}
        super().compile(optimizer=optimizer, loss=loss, loss_weights=loss_weights, **kwargs)

    def serving_signature(self, preprocessor, labels=None):
        """Served from `question` and `context` text: the best answer span (`span_outputs`);
        from ids: `start_logits` and `end_logits`."""
        check_no_labels(self, labels)
        return SpanSignature(self, preprocessor)

    def head_weight_map(self):
        """run_squad's `cls/squad/output_weights` [2, H] (start, end) and bias (HF's `qa_outputs`)."""
        return [
            (Transposed(self.span_logits.kernel), ["cls/squad/output_weights"]),
            (self.span_logits.bias, ["cls/squad/output_bias"]),
        ]

    @classmethod
    def head_arguments(cls, weights, head):
        """run_squad's head (TF1) or a BertForQuestionAnswering's."""
        if "cls/squad/output_weights" not in weights or head["architecture"] not in (None, cls.hf_architecture):
            return None
        return {}


class SpanSignature(ServingSignature):
    def from_text(self, texts, run):
        return span_outputs(run, self.preprocessor, texts)


def span_outputs(run, preprocessor, texts):
    """The best answer span in the context: text, byte offsets, score, and the [CLS]
    no-answer score (answer when `score` beats it by your SQuAD v2.0 threshold).

    The span maximises start + end logits over context tokens with end >= start and at
    most 30 tokens, as the original's decoding within one window.
    """
    question, context = texts
    tokenizer = preprocessor.tokenizer
    question_ids = tokenizer(question)
    context_ids, starts, ends = tokenizer.tokenize_with_offsets(context)
    packed = preprocessor.packer([question_ids, context_ids])
    logits = run(packed)
    start_logits, end_logits = as_float32(logits["start_logits"]), as_float32(logits["end_logits"])
    length = tf.shape(start_logits)[1]
    is_context = tf.logical_and(packed["input_type_ids"] == 1, packed["input_mask"] == 1)
    # The last context position is the final [SEP]: not part of any answer.
    total = tf.reduce_sum(packed["input_mask"], axis=1)
    is_context &= tf.range(length)[None, :] < (total - 1)[:, None]
    start_scores = tf.where(is_context, start_logits, NEG_INF)
    end_scores = tf.where(is_context, end_logits, NEG_INF)
    pair_scores = start_scores[:, :, None] + end_scores[:, None, :]
    offsets = tf.range(length)[None, :] - tf.range(length)[:, None]  # end - start
    allowed = (offsets >= 0) & (offsets < MAX_ANSWER_TOKENS)
    pair_scores = tf.where(allowed[None], pair_scores, 2 * NEG_INF)
    best = tf.argmax(tf.reshape(pair_scores, [tf.shape(pair_scores)[0], -1]), axis=1, output_type=tf.int32)
    start, end = best // length, best % length
    score = tf.reduce_max(tf.reshape(pair_scores, [tf.shape(pair_scores)[0], -1]), axis=1)
    # Packed position -> context piece: after [CLS], the kept question and its [SEP].
    context_first = tf.argmax(tf.cast(is_context, tf.int32), axis=1, output_type=tf.int32)
    has_context = tf.reduce_any(is_context, axis=1)
    start_piece = tf.cast(start - context_first, tf.int64)
    end_piece = tf.cast(end - context_first, tf.int64)
    safe_start = tf.where(has_context, start_piece, 0)
    safe_end = tf.where(has_context, end_piece, 0)
    row_starts = context_ids.row_starts()
    padded_starts = tf.concat([starts.flat_values, [0]], 0)
    padded_ends = tf.concat([ends.flat_values, [0]], 0)
    last = tf.size(starts.flat_values, out_type=tf.int64)
    start_byte = tf.gather(padded_starts, tf.where(has_context, row_starts + safe_start, last))
    end_byte = tf.gather(padded_ends, tf.where(has_context, row_starts + safe_end, last))
    return {
        "answer": tf.strings.substr(context, start_byte, end_byte - start_byte, unit="BYTE"),
        "answer_start_byte": start_byte,
        "answer_end_byte": end_byte,
        "score": tf.where(has_context, score, NEG_INF),
        "no_answer_score": start_logits[:, 0] + end_logits[:, 0],
    }
