"""Packs tokenized segments into BERT's fixed-layout model inputs.

`[CLS] a [SEP] b [SEP] ...` with type id `i` for segment `i` (the `[CLS]`
belongs to segment 0, each `[SEP]` to the segment it closes), padded with
`pad_id`. Built from core TensorFlow ops only, so an exported graph needs no
tf.text op for packing (tf.text's `RoundRobinTrim` is linked only by TF Serving
2.20+).
"""

import keras
import tensorflow as tf

from bert_keras.compat import accept_raw_inputs

TRUNCATIONS = ("longest_first", "round_robin", "waterfall")


@keras.saving.register_keras_serializable(package="bert_keras")
class BertPacker(keras.layers.Layer):
    """Segments of token ids -> `input_word_ids`, `input_mask`, `input_type_ids`.

    Args:
        seq_length: length of the packed sequences, or `None` for dynamic
            length: each batch is padded only to its longest packed sequence,
            rounded up to `pad_to_multiple_of` or to the next of
            `bucket_boundaries`, and at most `max_seq_length`.
        cls_id, sep_id, pad_id: special token ids (bert-base vocab defaults).
        truncation: how segments share the `seq_length - 1 - num_segments`
            token budget when they do not fit:
            * `"longest_first"` (default): the original run_classifier rule,
              drop the last token of the longest segment (ties: the later
              segment) until it fits;
            * `"round_robin"`: give each segment one token in turn (as
              tf.text's `RoundRobinTrimmer`). This always gives the same
              lengths as `"longest_first"`; both names are accepted because
              both are familiar;
            * `"waterfall"`: earlier segments keep all they need first.
        max_seq_length: longest dynamic sequence (only with `seq_length=None`).
        pad_to_multiple_of: dynamic lengths are rounded up to a multiple of
            this (multiples of 8 suit tensor cores and XLA shape caches).
        bucket_boundaries: optional sorted dynamic lengths to pad to instead;
            lengths above the last boundary pad to `max_seq_length`.

    Call: `packer(segments)` where `segments` is one ragged `[batch, (ids)]`
    tensor or a list/tuple of them (all with the same batch size); a ragged
    `[batch, (words), (pieces)]` tensor is flattened to its pieces. Returns a
    dict of int32 `[batch, seq_length]` tensors.
    """

    def __init__(
        self,
        seq_length=128,
        cls_id=101,
        sep_id=102,
        pad_id=0,
        truncation="longest_first",
        max_seq_length=512,
        pad_to_multiple_of=8,
        bucket_boundaries=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        accept_raw_inputs(self)
        self.built = True
        if truncation not in TRUNCATIONS:
            raise ValueError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}.")
        if seq_length is not None and seq_length < 2:
            raise ValueError(f"seq_length must be at least 2 ([CLS] and [SEP]), got {seq_length}.")
        if bucket_boundaries is not None and list(bucket_boundaries) != sorted(set(bucket_boundaries)):
            raise ValueError(f"bucket_boundaries must be strictly increasing, got {bucket_boundaries}.")
        if pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of must be positive, got {pad_to_multiple_of}.")
        self.seq_length = seq_length
        self.cls_id = int(cls_id)
        self.sep_id = int(sep_id)
        self.pad_id = int(pad_id)
        self.truncation = truncation
        self.max_seq_length = int(max_seq_length)
        self.pad_to_multiple_of = int(pad_to_multiple_of)
        self.bucket_boundaries = None if bucket_boundaries is None else [int(b) for b in bucket_boundaries]

    def call(self, inputs):
        return self.pack(inputs, self.seq_length)

    def pack(self, segments, seq_length):
        """Packs `segments` to `seq_length`: a Python int, a scalar int tensor (as
        the TF Hub `bert_pack_inputs` takes it), or `None` (dynamic, see the class)."""
        segments = _as_segment_list(segments)
        num_segments = len(segments)
        length_limit, lengths, kept = self._kept_lengths(segments, seq_length)

        batch_size = segments[0].nrows()
        # Position of segment i's first token: after [CLS] and the earlier
        # segments with their [SEP]s.
        starts = 1 + tf.cumsum(kept + 1, axis=1, exclusive=True)
        sep_positions = starts + kept
        total_lengths = sep_positions[:, -1] + 1
        if seq_length is None:
            # An empty batch still gets the length of an empty text, [CLS] + [SEP]s, so
            # that models can read position 0.
            empty_length = tf.constant([num_segments + 1], tf.int64)
            packed_length = self._dynamic_length(tf.reduce_max(tf.concat([total_lengths, empty_length], 0)))
        else:
            packed_length = length_limit

        def column(token_id):
            return tf.RaggedTensor.from_tensor(tf.fill(tf.stack([batch_size, 1]), token_id))

        parts = [column(self.cls_id)]
        for i, segment in enumerate(segments):
            first = segment.row_starts()
            index = tf.ragged.range(first, first + kept[:, i])
            parts += [index.with_flat_values(tf.gather(tf.cast(segment.flat_values, tf.int32), index.flat_values))]
            parts += [column(self.sep_id)]
        packed = tf.concat(parts, axis=1)
        word_ids = packed.to_tensor(default_value=self.pad_id, shape=tf.stack([batch_size, packed_length]))

        position = tf.range(packed_length)[tf.newaxis, :]
        input_mask = position < total_lengths[:, tf.newaxis]
        input_mask = tf.cast(input_mask, tf.int32)
        # A token's type is the number of [SEP]s strictly before it.
        type_ids = tf.zeros_like(input_mask)
        for i in range(num_segments - 1):
            type_ids += tf.cast(position > sep_positions[:, i : i + 1], tf.int32)
        return {"input_word_ids": word_ids, "input_mask": input_mask, "input_type_ids": type_ids * input_mask}

    def truncated_pieces(self, segments, seq_length=None):
        """int64 `[batch]`: how many pieces of each row `pack(segments, seq_length)`
        drops (`seq_length` None: this packer's own length, or `max_seq_length`)."""
        segments = _as_segment_list(segments)
        _, lengths, kept = self._kept_lengths(segments, self.seq_length if seq_length is None else seq_length)
        return tf.reduce_sum(lengths - kept, axis=1)

    def _kept_lengths(self, segments, seq_length):
        """(length limit, `[batch, segments]` lengths, and the lengths truncation keeps)."""
        num_segments = len(segments)
        length_limit = self.max_seq_length if seq_length is None else seq_length
        if tf.is_tensor(length_limit):
            length_limit = _checked_length(length_limit, num_segments)
        elif length_limit < num_segments + 1:
            raise ValueError(f"seq_length {length_limit} leaves no room for [CLS] and {num_segments} [SEP] tokens.")
        else:
            length_limit = tf.constant(length_limit, tf.int64)
        lengths = tf.stack([segment.row_lengths() for segment in segments], axis=1)
        budget = length_limit - (num_segments + 1)
        if self.truncation == "waterfall":
            return length_limit, lengths, _waterfall_lengths(lengths, budget)
        return length_limit, lengths, balanced_lengths(lengths, budget)

    def _dynamic_length(self, longest):
        if self.bucket_boundaries:
            boundaries = tf.constant(self.bucket_boundaries + [self.max_seq_length], tf.int64)
            length = tf.gather(boundaries, tf.searchsorted(boundaries, longest[tf.newaxis])[0])
        else:
            multiple = self.pad_to_multiple_of
            length = (longest + multiple - 1) // multiple * multiple
        return tf.minimum(length, self.max_seq_length)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "seq_length": self.seq_length,
                "cls_id": self.cls_id,
                "sep_id": self.sep_id,
                "pad_id": self.pad_id,
                "truncation": self.truncation,
                "max_seq_length": self.max_seq_length,
                "pad_to_multiple_of": self.pad_to_multiple_of,
                "bucket_boundaries": self.bucket_boundaries,
            }
        )
        return config


def _as_segment_list(segments):
    if isinstance(segments, dict):
        raise TypeError("BertPacker takes a ragged tensor or a list of them, not a dict.")
    if not isinstance(segments, (list, tuple)):
        segments = [segments]
    if not segments:
        raise ValueError("BertPacker needs at least one segment.")
    result = []
    for index, segment in enumerate(segments):
        if not isinstance(segment, tf.RaggedTensor):
            segment = tf.convert_to_tensor(segment)
            if segment.shape.rank != 2:
                raise ValueError(
                    f"Segment {index} must be ragged [batch, (ids)] or dense [batch, ids], got shape {segment.shape}."
                )
            segment = tf.RaggedTensor.from_tensor(segment)
        if segment.ragged_rank > 1:
            segment = segment.merge_dims(1, -1)
        if segment.shape.rank != 2 or not segment.dtype.is_integer:
            raise ValueError(
                f"Segment {index} must hold integer token ids of shape [batch, (ids)], "
                f"got {segment.dtype.name} of shape {segment.shape}."
            )
        result.append(segment.with_row_splits_dtype(tf.int64))
    return result


def _checked_length(seq_length, num_segments):
    """A scalar int tensor `seq_length`, checked when the graph runs."""
    if seq_length.shape.rank != 0 or not seq_length.dtype.is_integer:
        raise ValueError(
            f"seq_length must be a scalar integer, got {seq_length.dtype.name} of shape {seq_length.shape}."
        )
    seq_length = tf.cast(seq_length, tf.int64)
    check = tf.debugging.assert_greater_equal(
        seq_length,
        tf.constant(num_segments + 1, tf.int64),
        message=f"seq_length leaves no room for [CLS] and {num_segments} [SEP] tokens",
    )
    with tf.control_dependencies([check]):
        return tf.identity(seq_length)


def _waterfall_lengths(lengths, budget):
    """Earlier segments take what they need first."""
    before = tf.cumsum(lengths, axis=1, exclusive=True)
    return tf.clip_by_value(budget - before, 0, lengths)


def balanced_lengths(lengths, budget):
    """The original's "pop from the longest" rule in closed form.

    Popping from the longest (ties: the later segment) until the total fits
    leaves every segment at `min(length, cap)` for the largest `cap` that
    fits, plus one token for each of the earliest segments that were cut,
    while the budget lasts. `sum_i min(L_i, cap)` is the minimum over k of
    (sum of the k shortest + (n - k) * cap), hence the formula for `cap`.
    """
    num_segments = lengths.shape[1]
    shortest_first = tf.sort(lengths, axis=1)
    shortest_sums = tf.cumsum(shortest_first, axis=1, exclusive=True)
    cap = tf.reduce_max((budget - shortest_sums) // tf.range(num_segments, 0, -1, dtype=lengths.dtype), axis=1)
    cap = tf.maximum(cap, 0)[:, tf.newaxis]
    kept = tf.minimum(lengths, cap)
    left_over = budget - tf.reduce_sum(kept, axis=1, keepdims=True)
    cut = tf.cast(lengths > cap, lengths.dtype)
    extra = cut * tf.cast(tf.cumsum(cut, axis=1, exclusive=True) < left_over, lengths.dtype)
    return kept + extra
