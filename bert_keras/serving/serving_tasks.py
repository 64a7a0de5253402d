"""How an export runs a model's `ServingSignature`, and the signatures of the two
models that are not tasks.

Every task head says what it answers (`BertTask.serving_signature`, in
`bert_keras.tasks`); `serving_signature` here adds a small registry for the encoder
(pooled and sequence outputs) and the pre-training model (fill-mask), which keeps
serving code out of the model modules. Span answers and word tags are mapped back to
the request text through the tokenizer's byte offsets, so clients get text, not ids.

With a dynamic-length preprocessor (`seq_length=None`), `text_runner` runs the model on
length-sorted micro-batches (`length_sorted`): a request's texts differ in length, and
padding them all to the longest wastes most of the work on the short ones.
"""

import warnings

import tensorflow as tf

from bert_keras.models.encoder import INPUT_NAMES, BertEncoder
from bert_keras.models.pretrainer import BertPretrainer
from bert_keras.tasks.serving_signature import ServingSignature, as_float32, check_no_labels

MIN_MICRO_BATCH = 8  # rows; smaller matmuls lose more speed than padding costs


def serving_signature(model, preprocessor, labels=None, top_k=5):
    """The `ServingSignature` of a task head, encoder or pre-training model.

    `labels` name a classifier's classes or a tagger's tags; `top_k` is the fill-mask
    candidates per mask (pre-training model only)."""
    # By class, so a subclass is served as its base.
    signature = next((MODEL_SIGNATURES[cls] for cls in type(model).__mro__ if cls in MODEL_SIGNATURES), None)
    if signature is not None:
        check_no_labels(model, labels)
        return signature(model, preprocessor, top_k)
    if not hasattr(model, "serving_signature"):
        raise TypeError(f"no serving outputs defined for {type(model).__name__}")
    return model.serving_signature(preprocessor, labels=labels)


def trained_inputs(model, segments=None, labels=None):
    """The text inputs and labels to serve: those the model was trained with (recorded
    by `BertTask`), unless given; a given value that contradicts them is warned about,
    since the export would then answer inputs the model never saw (once: an export that
    checks itself resolves them again)."""
    trained_segments, trained_labels = getattr(model, "segments", None), getattr(model, "labels", None)
    if segments is not None and trained_segments is not None and tuple(segments) != tuple(trained_segments):
        what = "a different number of text inputs" if len(segments) != len(trained_segments) else "other input names"
        warnings.warn(
            f"serving text inputs {list(segments)}: {what} than the model was trained on ({list(trained_segments)})",
            stacklevel=1,
        )
    if labels is not None and trained_labels is not None and list(labels) != list(trained_labels):
        warnings.warn(f"serving labels {list(labels)} differ from the model's own {trained_labels}", stacklevel=1)
    return (segments if segments is not None else trained_segments, labels if labels is not None else trained_labels)


def text_runner(signature, micro_batches=4):
    """The `run` for `signature.from_text`: with a dynamic-length preprocessor, the
    model on up to `micro_batches` length-sorted micro-batches (1: one padded batch)."""
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be at least 1, got {micro_batches}")
    if signature.preprocessor.packer.seq_length is None and micro_batches > 1 and signature.micro_batching:
        return lambda packed: length_sorted(signature.run, packed, signature.token_outputs, micro_batches)
    return signature.run


def length_sorted(run, packed, token_outputs, micro_batches):
    """`run(packed)`, computed on length-sorted micro-batches each cut to its longest row.

    The rows are sorted by length and split into `micro_batches` slices of at least
    MIN_MICRO_BATCH rows; each slice drops the padding columns none of its rows need.
    A row's outputs depend only on its own tokens (padding gets exactly zero attention
    weight), so they equal those of one padded batch to float round-off. Outputs come
    back in request order; per-token ones (`token_outputs`: the keys of such outputs, or
    None when the output is one per-token tensor) are zero-padded to the batch length.
    Inputs other than the packed ids (e.g. `masked_lm_positions`) are only reordered.
    """
    mask = packed["input_mask"]
    batch, length = tf.shape(mask)[0], tf.shape(mask)[1]
    order = tf.argsort(tf.reduce_sum(mask, axis=1), stable=True)
    rows = {name: tf.gather(tensor, order) for name, tensor in packed.items()}
    lengths = tf.reduce_sum(rows["input_mask"], axis=1)
    size = tf.maximum(MIN_MICRO_BATCH, -(-batch // micro_batches))
    count = tf.maximum(1, -(-batch // size))

    def run_slice(index):
        start = index * size
        end = tf.minimum(start + size, batch)
        longest = tf.reduce_max(tf.concat([lengths[start:end], [1]], axis=0))
        piece = {
            name: tensor[start:end, :longest] if name in INPUT_NAMES else tensor[start:end]
            for name, tensor in rows.items()
        }
        outputs = run(piece)
        pad = lambda tensor: _pad_tokens(tensor, length)  # noqa: E731
        if token_outputs is None:
            padded = pad(outputs)
        elif token_outputs:
            padded = {
                key: tf.nest.map_structure(pad, value) if key in token_outputs else value
                for key, value in outputs.items()
            }
        else:
            padded = outputs
        return outputs, tf.nest.flatten(padded)

    def append_slice(index, done):
        return index + 1, [tf.concat([tensor, new], 0) for tensor, new in zip(done, run_slice(index)[1])]

    # The first slice runs outside the loop: it fixes the outputs' structure and dtypes.
    structure, first = run_slice(0)
    any_rows = [tf.TensorShape([None]).concatenate(tensor.shape[1:]) for tensor in first]
    _, flat = tf.while_loop(
        lambda index, _: index < count,
        append_slice,
        (tf.constant(1), first),
        shape_invariants=(tf.TensorShape([]), any_rows),
        parallel_iterations=1,
    )
    restore = tf.math.invert_permutation(order)
    return tf.nest.pack_sequence_as(structure, [tf.gather(tensor, restore) for tensor in flat])


def _pad_tokens(tensor, length):
    """Zero-pads axis 1 of a per-token output to `length`."""
    padding = [[0, 0], [0, length - tf.shape(tensor)[1]]] + [[0, 0]] * (len(tensor.shape) - 2)
    return tf.pad(tensor, padding)


class EncoderSignature(ServingSignature):
    """`pooled_output`, `sequence_output` and `input_mask`."""

    def from_ids(self, packed, run):
        outputs = run(packed)
        return {
            "pooled_output": as_float32(outputs["pooled_output"]),
            "sequence_output": as_float32(outputs["sequence_output"]),
            "input_mask": packed["input_mask"],
        }


class FillMaskSignature(ServingSignature):
    """Top-k fillers of each `[MASK]`: `mask_positions`, `top_ids`, `top_tokens`,
    `top_probabilities` (-1, "" and 0 where a row has fewer masks)."""

    def __init__(self, model, preprocessor, top_k=5):
        super().__init__(model, preprocessor)
        self.top_k = top_k

    def tokenize(self, texts):
        return [tokenize_masked(self.preprocessor.tokenizer, text) for text in texts]

    def from_text(self, texts, run):
        return fill_mask_outputs(run, self.preprocessor, texts, self.top_k)

    def from_ids(self, packed, run):
        return fill_mask_from_packed(run, self.preprocessor.tokenizer, packed, self.top_k)


# The models that are not tasks: (model, preprocessor, top_k) -> their signature.
MODEL_SIGNATURES = {
    BertEncoder: lambda model, preprocessor, top_k: EncoderSignature(model, preprocessor),
    BertPretrainer: FillMaskSignature,
}


def fill_mask_outputs(run, preprocessor, texts, top_k):
    """Top-k fillers for each literal `[MASK]` in the text (`tokenize_masked`)."""
    (text,) = texts
    ids, _, _ = tokenize_masked(preprocessor.tokenizer, text)
    return fill_mask_from_packed(run, preprocessor.tokenizer, preprocessor.packer([ids]), top_k)


def tokenize_masked(tokenizer, text):
    """`tokenizer.tokenize_with_offsets(text)` where each literal `[MASK]` is the mask piece.

    The tokenizer reads `[MASK]` as plain text, as the original does, so the text is
    cut at each `[MASK]`, the parts tokenized and the mask id put between them; offsets
    are bytes in `text`, the mask piece's those of its literal.
    """
    mask_token = tokenizer.mask_token
    parts = tf.strings.split(text, sep=mask_token)
    ids, starts, ends = tokenizer.tokenize_with_offsets(parts.flat_values)
    # Where each part starts in its text: after the parts and masks before it.
    spans = tf.cast(tf.strings.length(parts.flat_values), tf.int64) + len(mask_token.encode())
    before = tf.cumsum(spans, exclusive=True)
    part_starts = before - tf.gather(before, tf.gather(parts.row_starts(), parts.value_rowids()))
    mask_starts = part_starts + spans - len(mask_token.encode())
    count = tf.size(parts.flat_values)
    mask_piece = [
        tf.fill([count, 1], tf.constant(tokenizer.mask_id, ids.dtype)),
        mask_starts[:, None],
        mask_starts[:, None] + len(mask_token.encode()),
    ]
    # Drop the mask after each text's last part. Elementwise work is on flat values: ragged
    # broadcasting builds a graph of shape checks that tracing, saving and a server's first
    # run all pay for (a tiny fill-mask export: 18 -> 11 CPU-seconds).
    is_last = tf.equal(
        tf.range(tf.size(parts.flat_values, out_type=tf.int64)) + 1, tf.gather(parts.row_limits(), parts.value_rowids())
    )
    pieces = []
    for values, mask in zip((ids, shifted(starts, part_starts), shifted(ends, part_starts)), mask_piece):
        with_mask = tf.concat([values, tf.RaggedTensor.from_tensor(mask)], axis=1)
        lengths, rows = with_mask.row_lengths(), with_mask.value_rowids()
        at_end = tf.equal(tf.ragged.range(lengths).flat_values, tf.gather(lengths - 1, rows))
        kept = tf.ragged.boolean_mask(with_mask, with_mask.with_flat_values(~(tf.gather(is_last, rows) & at_end)))
        pieces.append(parts.with_flat_values(kept).merge_dims(1, 2))
    return tuple(pieces)


def shifted(offsets, shifts):
    """Ragged `offsets` with each row's `shifts[row]` added."""
    return offsets.with_flat_values(offsets.flat_values + tf.gather(shifts, offsets.value_rowids()))


def fill_mask_from_packed(run, tokenizer, packed, top_k):
    is_mask = tf.equal(packed["input_word_ids"], tokenizer.mask_id)
    positions = tf.ragged.boolean_mask(tf.broadcast_to(tf.range(tf.shape(is_mask)[1]), tf.shape(is_mask)), is_mask)
    inputs = {**packed, "masked_lm_positions": positions.to_tensor(default_value=0)}
    probabilities = tf.nn.softmax(as_float32(run(inputs)["mlm_logits"]))
    top_probabilities, top_ids = tf.math.top_k(probabilities, k=top_k)
    valid = tf.sequence_mask(positions.row_lengths(), tf.shape(top_ids)[1])[:, :, None]
    vocabulary = tf.constant(tokenizer.vocabulary)
    return {
        "mask_positions": tf.cast(positions.to_tensor(default_value=-1), tf.int32),
        "top_ids": tf.where(valid, top_ids, -1),
        "top_tokens": tf.where(valid, tf.gather(vocabulary, top_ids), ""),
        "top_probabilities": tf.where(valid, top_probabilities, 0.0),
    }
