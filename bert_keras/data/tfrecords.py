"""Pre-training TFRecord files in the original tool's layout: names, checks, tf.data reading."""

import re

import tensorflow as tf

# The original tool's TFRecord features. masked_lm_weights is the only float feature.
INT_FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids")
# The file beside `create-pretraining-data`'s TFRecords that describes them.
MANIFEST_SUFFIX = ".manifest.json"
# TFRecord name -> model feature name (the encoder's TF Hub style inputs).
MODEL_NAMES = {"input_ids": "input_word_ids", "segment_ids": "input_type_ids"}


def expand_files(patterns):
    """Glob patterns (or a comma-separated string) -> sorted, de-duplicated files, or an error.

    Local or on any filesystem TensorFlow reads (gs://, hdfs://, ...). Manifests of
    `create-pretraining-data` (OUTPUT.manifest.json) are left out, so the original
    README's `OUTPUT*` pattern names only the TFRecords.
    """
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    files = []
    for pattern in patterns:
        pattern = str(pattern)
        matches = sorted(tf.io.gfile.glob(pattern))
        if not matches and tf.io.gfile.exists(pattern) and not tf.io.gfile.isdir(pattern):
            matches = [pattern]  # a name glob cannot match as written, e.g. with [ or *
        matches = [m for m in matches if not m.endswith(MANIFEST_SUFFIX)]
        if not matches:
            raise FileNotFoundError(f"no input files match {pattern}")
        files.extend(m for m in matches if m not in files)
    return files


def shard_names(output, num_shards):
    """`output` itself for one shard, else `output-00000-of-00004` ... ."""
    if num_shards <= 1:
        return [str(output)]
    return [f"{output}-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)]


def parse_example(serialized, max_seq_length, max_predictions_per_seq):
    """Serialized original-format examples (any shape) -> the model's feature dict (int32),
    each feature shaped `serialized.shape + [length]`."""
    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in INT_FEATURES[:3]}
    spec.update({name: tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64) for name in INT_FEATURES[3:]})
    spec["masked_lm_weights"] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32)
    spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
    parsed = tf.io.parse_example(serialized, spec)
    return {
        MODEL_NAMES.get(name, name): value if value.dtype == tf.float32 else tf.cast(value, tf.int32)
        for name, value in parsed.items()
    }


def check_tfrecords(files, max_seq_length, max_predictions_per_seq, records=8):
    """The number of records (up to `records`) at the start of each of `files`, read
    through TFRecord framing and CRCs and parsed at these lengths: before training
    starts, an error that names a file that is not a TFRecord file, is truncated or
    corrupt, or holds records of other lengths (training would fail later with a bare
    `DataLossError: corrupted record at 0` that names no file)."""
    counts = []
    for path in files:
        head = read_records(path, records)
        if head:
            try:
                parse_example(tf.constant(head[:1]), max_seq_length, max_predictions_per_seq)
            except tf.errors.InvalidArgumentError as error:
                raise ValueError(
                    f"{path}: record 0 is not a pre-training example of seq length {max_seq_length} with "
                    f"{max_predictions_per_seq} predictions (made for other lengths, or by another tool?): "
                    f"{tf_error_text(error)}"
                ) from None
        counts.append(len(head))
    return counts


def read_records(path, limit=-1):
    """The first `limit` (all: -1) serialized records of the TFRecord file `path`."""
    return list(_records(path, limit))


def find_corrupt_tfrecord(files):
    """After a `DataLossError` in training: reads every record of `files`, raising the
    error of `_records` for the first broken file."""
    for path in files:
        for _ in _records(path):
            pass


def _records(path, limit=-1):
    """Yields records, or raises a ValueError that names the file and the record where
    its framing or CRC breaks."""
    count = 0
    try:
        for record in tf.data.TFRecordDataset(path).take(limit):
            yield record.numpy()
            count += 1
    except tf.errors.DataLossError as error:
        raise ValueError(
            f"{path}: not a TFRecord file, or truncated or corrupt at record {count} ({tf_error_text(error)})"
        ) from None
    except tf.errors.NotFoundError:
        raise FileNotFoundError(f"no TFRecord file at {path}") from None


def tf_error_text(error):
    """A TensorFlow op error's own words, without the function and op names around them."""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", error.message.splitlines()[0])
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", text)


def pretraining_dataset(
    file_patterns,
    batch_size,
    max_seq_length=128,
    max_predictions_per_seq=20,
    shuffle_buffer=10000,
    seed=0,
    repeat=True,
    skip_batches=0,
):
    """Batches of the model's feature dict from original-format TFRecords.

    Deterministic for a given seed (file order, shuffle order), so a resumed run can
    `skip_batches` to where it stopped. Static shapes (`drop_remainder`).
    """
    files = expand_files(file_patterns)
    dataset = tf.data.TFRecordDataset(files)
    if repeat:
        dataset = dataset.repeat()
    if shuffle_buffer:
        # One order for every iterator: Keras may open one to build the model before training.
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=False)
    # A batch of records parsed at once: ~4x the rate of one at a time (bench_dynamic_masking.py).
    dataset = dataset.batch(batch_size, drop_remainder=True).map(
        lambda records: parse_example(records, max_seq_length, max_predictions_per_seq),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if skip_batches:
        dataset = dataset.skip(skip_batches)
    return dataset.prefetch(tf.data.AUTOTUNE)
