"""Packing pre-training instances: several short instances in one row of `seq_length`.

BERT's recipe makes one instance per stretch of a document, so a corpus of short
documents is mostly padding (70% at seq 512 on SQuAD's paragraphs). Packed rows hold up
to `max_sequences` instances, each keeping its own [CLS]/[SEP] layout and segment ids;
`packed_sequence_ids` tells the encoder where each one lies (positions restart, attention
stays inside; see `BertEncoder`), the masked-LM positions move with their instance, and
each instance's [CLS] position gets its next-sentence label (Krell et al. 2021,
"Efficient Sequence Packing without Cross-contamination").
"""

import math
import zlib

import numpy as np
import tensorflow as tf


def row_predictions(max_predictions_per_seq, max_sequences, seq_length, masked_lm_prob=0.15):
    """Masked-LM slots of a packed row: as many as an unpacked row has, or 15% of the
    row's tokens if that is more. The recipe masks 15% of an instance's tokens (at most
    `max_predictions_per_seq`), so a full row holds about that many; rows are packed
    within the limit, and an instance that would overflow it by rounding goes to another
    row (on SQuAD paragraphs and Gutenberg it never did: bench/bench_packing.py). Every
    slot costs a vocabulary-sized projection: more slots than an unpacked row made the
    masked-LM head dearer than packing saved on long documents."""
    return min(
        max_sequences * max_predictions_per_seq, max(max_predictions_per_seq, math.ceil(masked_lm_prob * seq_length))
    )


def first_fit_decreasing(lengths, seq_length, max_sequences, predictions=None, max_predictions=None):
    """Rows of instance indices: longest first, each into the first row with room for
    its length, for one more instance (at most `max_sequences` a row) and, with
    `predictions` (per instance), for its predictions (at most `max_predictions` a row)."""
    predictions = np.zeros(len(lengths), int) if predictions is None else np.asarray(predictions, int)
    max_predictions = int(predictions.max(initial=0)) * max_sequences if max_predictions is None else max_predictions
    rows, room, slots = [], [], []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        length, wanted = int(lengths[index]), int(predictions[index])
        if length > seq_length:
            raise ValueError(f"instance {index} has {length} tokens, more than seq_length {seq_length}")
        for row, free in enumerate(room):
            if free >= length and slots[row] >= wanted and len(rows[row]) < max_sequences:
                rows[row].append(index)
                room[row] -= length
                slots[row] -= wanted
                break
        else:
            rows.append([index])
            room.append(seq_length - length)
            slots.append(max_predictions - wanted)
    return rows


def pack_instances(features, seq_length, max_sequences, rows=None, max_predictions=None):
    """Unpacked pre-training features (numpy, as `tfrecords` parses them:
    `input_word_ids`, `input_mask`, `input_type_ids` [N, L], `masked_lm_positions`,
    `masked_lm_ids`, `masked_lm_weights` [N, P], `next_sentence_labels` [N] or [N, 1])
    -> packed features of `len(rows)` rows (default `first_fit_decreasing`), with
    `packed_sequence_ids`, `next_sentence_positions`, `next_sentence_weights` and
    masked-LM arrays of `max_predictions` slots (default `row_predictions`)."""
    features = {name: np.asarray(value) for name, value in features.items()}
    lengths = features["input_mask"].sum(axis=1)
    real = features["masked_lm_weights"] > 0
    counts = real.sum(axis=1)
    if max_predictions is None:
        max_predictions = row_predictions(features["masked_lm_positions"].shape[1], max_sequences, seq_length)
    if rows is None:
        rows = first_fit_decreasing(lengths, seq_length, max_sequences, counts, max_predictions)
    for members in rows:
        if (
            len(members) > max_sequences
            or sum(int(lengths[i]) for i in members) > seq_length
            or sum(int(counts[i]) for i in members) > max_predictions
        ):
            raise ValueError(
                f"instances {list(members)} do not fit one row of {seq_length} tokens, "
                f"{max_sequences} sequences and {max_predictions} predictions"
            )
    out = {
        name: np.zeros((len(rows), seq_length), np.int32)
        for name in ("input_word_ids", "input_mask", "input_type_ids", "packed_sequence_ids")
    }
    out.update(
        {
            name: np.zeros((len(rows), max_predictions), dtype)
            for name, dtype in (
                ("masked_lm_positions", np.int32),
                ("masked_lm_ids", np.int32),
                ("masked_lm_weights", np.float32),
            )
        }
    )
    out.update(
        {
            name: np.zeros((len(rows), max_sequences), dtype)
            for name, dtype in (
                ("next_sentence_positions", np.int32),
                ("next_sentence_labels", np.int32),
                ("next_sentence_weights", np.float32),
            )
        }
    )
    labels = features["next_sentence_labels"].reshape(-1)
    for row, members in enumerate(rows):
        start = slot = 0
        for k, index in enumerate(members):
            length = int(lengths[index])
            for name in ("input_word_ids", "input_mask", "input_type_ids"):
                out[name][row, start : start + length] = features[name][index, :length]
            out["packed_sequence_ids"][row, start : start + length] = k + 1
            count = int(counts[index])
            out["masked_lm_positions"][row, slot : slot + count] = (
                features["masked_lm_positions"][index][real[index]] + start
            )
            out["masked_lm_ids"][row, slot : slot + count] = features["masked_lm_ids"][index][real[index]]
            out["masked_lm_weights"][row, slot : slot + count] = 1.0
            out["next_sentence_positions"][row, k] = start
            out["next_sentence_labels"][row, k] = labels[index]
            out["next_sentence_weights"][row, k] = 1.0
            start += length
            slot += count
    return out


# --- in tf.data -----------------------------------------------------------------------------

INSTANCE_FEATURES = (
    "input_word_ids",
    "input_mask",
    "input_type_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)
# Packed features: (name, dtype, width as a multiple of (seq_length, max_sequences, slots)).
PACKED_FEATURES = (
    ("input_word_ids", "int32", "seq"),
    ("input_mask", "int32", "seq"),
    ("input_type_ids", "int32", "seq"),
    ("packed_sequence_ids", "int32", "seq"),
    ("masked_lm_positions", "int32", "slots"),
    ("masked_lm_ids", "int32", "slots"),
    ("masked_lm_weights", "float32", "slots"),
    ("next_sentence_positions", "int32", "rows"),
    ("next_sentence_labels", "int32", "rows"),
    ("next_sentence_weights", "float32", "rows"),
)


def pack_dataset(batches, seq_length, max_sequences, rows_per_batch, window=1024):
    """Batches of unpacked instances (either pre-training pipeline's output) -> batches of
    `rows_per_batch` packed rows: every `window` instances, in stream order, are packed
    by first-fit-decreasing (a window of 1024 makes 0.1-0.3% more rows than packing 4096
    at once: bench/bench_packing.py) and the window's rows shuffled. Deterministic,
    static shapes."""
    slots = row_predictions(batches.element_spec["masked_lm_positions"].shape[1], max_sequences, seq_length)
    widths = {"seq": seq_length, "slots": slots, "rows": max_sequences}

    def pack(*arrays):
        features = dict(zip(INSTANCE_FEATURES, arrays))
        packed = pack_instances(features, seq_length, max_sequences)
        # First-fit-decreasing lists rows longest first: shuffled, so batches do not go from
        # long instances to short ones within each window (seeded by the window: resumable).
        order = np.random.default_rng(zlib.crc32(features["input_word_ids"].tobytes())).permutation(
            len(packed["input_word_ids"])
        )
        return [packed[name][order].astype(dtype) for name, dtype, _ in PACKED_FEATURES]

    def pack_window(features):
        outputs = tf.numpy_function(
            pack,
            [features[name] for name in INSTANCE_FEATURES],
            [tf.as_dtype(dtype) for _, dtype, _ in PACKED_FEATURES],
            stateful=False,
        )
        rows = {}
        for (name, _, width), tensor in zip(PACKED_FEATURES, outputs):
            tensor.set_shape([None, widths[width]])
            rows[name] = tensor
        return rows

    instances = batches.unbatch().batch(window)
    rows = instances.map(pack_window, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
    return rows.batch(rows_per_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def packing_statistics(batches, seq_length, max_sequences, window=1024):
    """{"sequences_per_row", "padding", "padding_unpacked"} of the first `window`
    instances of `batches` packed as `pack_dataset` packs them: what a run reports, and
    what turns a batch of sequences into a number of rows."""
    features = next(iter(batches.unbatch().batch(window).take(1)))
    mask = features["input_mask"].numpy()
    tokens, count = int(mask.sum()), len(mask)
    predictions = (features["masked_lm_weights"].numpy() > 0).sum(axis=1)
    slots = row_predictions(features["masked_lm_positions"].shape[1], max_sequences, seq_length)
    rows = len(first_fit_decreasing(mask.sum(axis=1), seq_length, max_sequences, predictions, slots))
    return {
        "sequences_per_row": count / rows,
        "padding": 1 - tokens / (rows * seq_length),
        "padding_unpacked": 1 - tokens / (count * seq_length),
    }
