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
SPAN_CANDIDATES_SIGNATURE = "span_candidates"  # the export's signature of the best spans
MAX_SPAN_CANDIDATES = 5


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

    def text_signatures(self, run):
        return {SPAN_CANDIDATES_SIGNATURE: lambda texts: span_candidates(run, self.preprocessor, texts)}


def span_outputs(run, preprocessor, texts):
    """The best answer span in the context: text, byte offsets, score, and the [CLS]
    no-answer score (answer when `score` beats it by your SQuAD v2.0 threshold).

    The span maximises start + end logits over context tokens with end >= start and at
    most 30 tokens, as the original's decoding within one window.
    """
    spans = _ContextSpans(run, preprocessor, texts)
    best = tf.argmax(spans.pair_scores, axis=1, output_type=tf.int32)[:, None]
    answer, start_byte, end_byte = spans.answers(best)
    score = tf.reduce_max(spans.pair_scores, axis=1)
    return {
        "answer": answer[:, 0],
        "answer_start_byte": start_byte[:, 0],
        "answer_end_byte": end_byte[:, 0],
        "score": tf.where(spans.has_context, score, NEG_INF),
        "no_answer_score": spans.start_logits[:, 0] + spans.end_logits[:, 0],
    }


def span_candidates(run, preprocessor, texts, count=MAX_SPAN_CANDIDATES):
    """The `count` best spans of `span_outputs`' decoding, best first: `answers`,
    `start_bytes`, `end_bytes` and `scores` `[batch, count]`, and `num_candidates`
    `[batch]` (fewer where the context has fewer spans; the rest are "", 0, 0 and -1e9)."""
    spans = _ContextSpans(run, preprocessor, texts)
    count = tf.minimum(count, tf.shape(spans.pair_scores)[1])
    scores, best = tf.math.top_k(spans.pair_scores, k=count)
    valid = tf.gather(spans.allowed, best, batch_dims=1)
    answers, start_bytes, end_bytes = spans.answers(best, valid)
    return {
        "answers": answers,
        "start_bytes": start_bytes,
        "end_bytes": end_bytes,
        "scores": tf.where(valid, scores, NEG_INF),
        "num_candidates": tf.reduce_sum(tf.cast(valid, tf.int32), axis=1),
    }


class _ContextSpans:
    """The model's start and end logits on (question, context) texts, and the score of
    every (start, end) pair of packed positions, flattened to `pair_scores` `[batch,
    length * length]` (index start * length + end): start + end logits where both are
    context tokens, end >= start and the span has at most MAX_ANSWER_TOKENS (`allowed`),
    far below any allowed pair elsewhere."""

    def __init__(self, run, preprocessor, texts):
        question, self.context = texts
        tokenizer = preprocessor.tokenizer
        question_ids = tokenizer(question)
        self.context_ids, self.starts, self.ends = tokenizer.tokenize_with_offsets(self.context)
        packed = preprocessor.packer([question_ids, self.context_ids])
        logits = run(packed)
        self.start_logits = as_float32(logits["start_logits"])
        self.end_logits = as_float32(logits["end_logits"])
        self.length = tf.shape(self.start_logits)[1]
        is_context = tf.logical_and(packed["input_type_ids"] == 1, packed["input_mask"] == 1)
        # The last context position is the final [SEP]: not part of any answer.
        total = tf.reduce_sum(packed["input_mask"], axis=1)
        is_context &= tf.range(self.length)[None, :] < (total - 1)[:, None]
        start_scores = tf.where(is_context, self.start_logits, NEG_INF)
        end_scores = tf.where(is_context, self.end_logits, NEG_INF)
        pair_scores = start_scores[:, :, None] + end_scores[:, None, :]
        offsets = tf.range(self.length)[None, :] - tf.range(self.length)[:, None]  # end - start
        short = (offsets >= 0) & (offsets < MAX_ANSWER_TOKENS)
        batch = tf.shape(pair_scores)[0]
        self.pair_scores = tf.reshape(tf.where(short[None], pair_scores, 2 * NEG_INF), [batch, -1])
        allowed = short[None] & is_context[:, :, None] & is_context[:, None, :]
        self.allowed = tf.reshape(allowed, [batch, -1])
        # Packed position -> context piece: after [CLS], the kept question and its [SEP].
        self.context_first = tf.argmax(tf.cast(is_context, tf.int32), axis=1, output_type=tf.int32)
        self.has_context = tf.reduce_any(is_context, axis=1)

    def answers(self, pairs, valid=None):
        """(text, start byte, end byte) `[batch, k]` of the context for flat pair indices
        `pairs` `[batch, k]`; "", 0, 0 where the row has no context (or not `valid`)."""
        valid = tf.broadcast_to(self.has_context[:, None], tf.shape(pairs)) if valid is None else valid
        first = self.context_first[:, None]
        row_starts = self.context_ids.row_starts()[:, None]
        last = tf.size(self.starts.flat_values, out_type=tf.int64)  # the 0 appended below

        def byte_at(position, offsets):
            piece = tf.cast(position - first, tf.int64)
            index = tf.where(valid, row_starts + tf.where(valid, piece, 0), last)
            return tf.gather(tf.concat([offsets.flat_values, [0]], 0), index)

        start_byte = byte_at(pairs // self.length, self.starts)
        end_byte = byte_at(pairs % self.length, self.ends)
        context = tf.broadcast_to(self.context[:, None], tf.shape(start_byte))
        return tf.strings.substr(context, start_byte, end_byte - start_byte, unit="BYTE"), start_byte, end_byte
