"""Pre-training data: the original create_pretraining_data.py recipe, its TFRecords, tf.data.

Static data (TFRecords made shard by shard by `pretraining_shards.create_pretraining_data`,
read by `pretraining_dataset`) follows google-research/bert step for step: the same
random-number calls in the same order on a `random.Random(seed)`, so the same documents
give the same instances as the original tool (WordPiece ids come from the in-graph `BertTokenizer`, which equals the
original tokenizer). `dynamic_masking.dynamic_masking_dataset` runs the same recipe in
tf.data, with new A/B pairings and new masks every epoch.

Two document formats are read:
- "lines": one sentence per line, a blank line between documents (the original format,
  e.g. sample_text.txt).
- "prose": paragraphs separated by blank lines, lines wrapped anywhere (Project
  Gutenberg). Paragraphs are split into sentences by `split_sentences`; a heading
  paragraph (CHAPTER/BOOK/VOLUME/PART ..., or a Roman numeral "IV. Title") starts a new
  document and is dropped, as are bracketed title lines such as "[Emma by Jane Austen]".
"""

import collections
import functools
import hashlib
import re
from pathlib import Path

import numpy as np
import tensorflow as tf

# The original tool's TFRecord features. masked_lm_weights is the only float feature.
INT_FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids")
# The file beside `create-pretraining-data`'s TFRecords that describes them.
MANIFEST_SUFFIX = ".manifest.json"
# The tokenizer's constructor arguments besides its vocabulary.
TOKENIZER_SETTINGS = (
    "lower_case",
    "max_chars_per_word",
    "max_input_bytes",
    "unk_token",
    "cls_token",
    "sep_token",
    "pad_token",
    "mask_token",
)
# TFRecord name -> model feature name (the encoder's TF Hub style inputs).
MODEL_NAMES = {"input_ids": "input_word_ids", "segment_ids": "input_type_ids"}

Instance = collections.namedtuple(
    "Instance", ["input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids", "is_random_next"]
)

# The text rules, shared with the tf.data reader of `dynamic_masking` (which writes them as RE2).
FORMATS = ("auto", "lines", "prose")
HEADING_WORDS = ("CHAPTER", "Chapter", "BOOK", "Book", "VOLUME", "Volume", "PART", "Part")
HEADING_ENDS = (".", "!", "?", '"')  # a one-line paragraph ending so is a sentence, not a heading
LINE_ENDS = (".", "!", "?", '"', "'", "\u201d")  # `detect_format`: lines ending so are sentences
ABBREVIATIONS = (
    "mr",
    "mrs",
    "ms",
    "dr",
    "st",
    "mt",
    "jr",
    "sr",
    "prof",
    "rev",
    "gen",
    "col",
    "capt",
    "lt",
    "sgt",
    "hon",
    "esq",
    "vs",
    "etc",
    "no",
    "vol",
    "ch",
    "fig",
    "cf",
    "e.g",
    "i.e",
)
_HEADING = re.compile(rf"^(?:(?:{'|'.join(HEADING_WORDS)})\b|[IVXLC]+\.\s|[IVXLC]+$)")
_TITLE = re.compile(r"^\[.*\]$")
# A sentence ends at . ! or ? (plus closing quotes/brackets) followed by space and a
# capital, digit or opening quote. Abbreviations and initials do not end sentences.
_SENTENCE_END = re.compile(r"""[.!?]+["'\u2019\u201d)\]_]*\s+(?=["'\u2018\u201c(\[_]*[A-Z0-9])""")
_ABBREVIATIONS = frozenset(ABBREVIATIONS)


def split_sentences(paragraph):
    """Splits prose into sentences with a rule, not a model: good enough for BERT's A/B split.

    Whitespace (including line wraps) is collapsed first. "Mr. Knightley" and "A. M."
    stay in one sentence; "...said she. Then" splits.
    """
    text = " ".join(paragraph.split())
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        words = text[start : match.start() + 1].split()
        last = words[-1].rstrip(".").lower() if words else ""
        if text[match.start()] == "." and (last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha())):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    if text[start:].strip():
        sentences.append(text[start:].strip())
    return sentences


def read_documents(path, format="auto"):
    """A file -> list of documents, each a list of sentence strings (see module doc)."""
    return parse_documents(Path(path).read_bytes().decode("utf-8", errors="ignore"), format)  # as the original reader


def check_format(format):
    if format not in FORMATS:
        raise ValueError(f"document format must be 'auto', 'lines' or 'prose', got {format!r}")


def parse_documents(text, format="auto"):
    """Text -> list of documents, each a list of sentence strings (see module doc)."""
    check_format(format)
    if format == "auto":
        format = detect_format(text)
    if format == "lines":
        documents = [[]]
        for line in text.splitlines():
            line = line.strip()
            if not line:
                documents.append([])
            else:
                documents[-1].append(line)
    else:
        documents = [[]]
        for paragraph in re.split(r"\n\s*\n", text):
            paragraph = paragraph.strip()
            if not paragraph or _TITLE.match(paragraph):
                continue
            if "\n" not in paragraph and is_heading(paragraph):
                documents.append([])
                continue
            documents[-1].extend(split_sentences(paragraph))
    return [document for document in documents if document]


def is_heading(line):
    """A stripped one-line paragraph that starts a new prose document (and is dropped)."""
    return bool(_HEADING.match(line)) and not line.endswith(HEADING_ENDS)


def detect_format(text):
    """'prose' when most non-blank lines are wrapped text (no sentence end), else 'lines'."""
    lines = [line.strip() for line in text.splitlines()[:2000] if line.strip()]
    if not lines:
        return "lines"
    ending = sum(line.endswith(LINE_ENDS) for line in lines)
    return "lines" if ending >= 0.5 * len(lines) else "prose"


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


def tokenizer_fingerprint(tokenizer):
    """Everything that decides a tokenizer's ids: its vocabulary (hashed) and its settings."""
    vocabulary = "\n".join(tokenizer.vocabulary).encode("utf-8")
    config = tokenizer.get_config()
    return {
        "vocab_sha256": hashlib.sha256(vocabulary).hexdigest(),
        "vocab_size": len(tokenizer.vocabulary),
        **{key: config[key] for key in TOKENIZER_SETTINGS},
    }


def tokenize_documents(documents, tokenizer, batch_size=4096):
    """Sentences -> lists of WordPiece ids through the in-graph tokenizer, in large batches.

    Sentences that tokenize to nothing are dropped, as the original does; so are
    documents left empty.
    """
    flat = [sentence for document in documents for sentence in document]
    ids = []
    for start in range(0, len(flat), batch_size):
        ragged = tokenizer(tf.constant(flat[start : start + batch_size]))
        values, splits = ragged.flat_values.numpy().tolist(), ragged.row_splits.numpy()
        ids.extend(values[a:b] for a, b in zip(splits[:-1], splits[1:]))
    tokenized, position = [], 0
    for document in documents:
        sentences = [s for s in ids[position : position + len(document)] if s]
        position += len(document)
        if sentences:
            tokenized.append(sentences)
    return tokenized


class InstanceMaker:
    """create_instances_from_document + create_masked_lm_predictions of the original, on ids.

    `special_ids` ([CLS], [SEP]) are never masked; `continuation` marks "##" pieces
    for whole-word masking. Random replacement draws from the whole vocabulary, as the
    original does.
    """

    def __init__(
        self,
        vocabulary,
        max_seq_length=128,
        short_seq_prob=0.1,
        masked_lm_prob=0.15,
        max_predictions_per_seq=20,
        whole_word_mask=False,
    ):
        self.vocab_size = len(vocabulary)
        index = {token: i for i, token in enumerate(vocabulary)}
        missing = [t for t in ("[CLS]", "[SEP]", "[MASK]") if t not in index]
        if missing:
            raise ValueError(f"the vocabulary has no {missing} token(s)")
        self.cls_id, self.sep_id, self.mask_id = index["[CLS]"], index["[SEP]"], index["[MASK]"]
        self.continuation = [token.startswith("##") for token in vocabulary]
        if max_seq_length < 5:
            raise ValueError(f"max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP]), got {max_seq_length}")
        self.max_seq_length = max_seq_length
        self.short_seq_prob = short_seq_prob
        self.masked_lm_prob = masked_lm_prob
        self.max_predictions_per_seq = max_predictions_per_seq
        self.whole_word_mask = whole_word_mask

    def instances(self, documents, dupe_factor, rng, encode=None):
        """create_training_instances after reading: shuffle documents, dupe, shuffle instances.

        `encode` (e.g. to serialized records) is applied to each instance as it is made,
        so only the encoded form is held until the final shuffle, which depends only on
        the number of instances.
        """
        documents = list(documents)
        rng.shuffle(documents)
        instances = []
        for _ in range(dupe_factor):
            for index in range(len(documents)):
                made = self.from_document(documents, index, rng)
                instances.extend(made if encode is None else map(encode, made))
        rng.shuffle(instances)
        return instances

    def from_document(self, documents, document_index, rng):
        document = documents[document_index]
        max_num_tokens = self.max_seq_length - 3
        target_seq_length = max_num_tokens
        if rng.random() < self.short_seq_prob:
            target_seq_length = rng.randint(2, max_num_tokens)
        instances, chunk, length, i = [], [], 0, 0
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target_seq_length:
                if chunk:
                    a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                    tokens_a = [t for segment in chunk[:a_end] for t in segment]
                    tokens_b = []
                    if len(chunk) == 1 or rng.random() < 0.5:
                        is_random_next = True
                        target_b_length = target_seq_length - len(tokens_a)
                        for _ in range(10):
                            random_index = rng.randint(0, len(documents) - 1)
                            if random_index != document_index:
                                break
                        random_document = documents[random_index]
                        for segment in random_document[rng.randint(0, len(random_document) - 1) :]:
                            tokens_b.extend(segment)
                            if len(tokens_b) >= target_b_length:
                                break
                        i -= len(chunk) - a_end  # put the unused sentences back
                    else:
                        is_random_next = False
                        tokens_b = [t for segment in chunk[a_end:] for t in segment]
                    truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                    input_ids = [self.cls_id, *tokens_a, self.sep_id, *tokens_b, self.sep_id]
                    segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                    input_ids, positions, labels = self.mask(input_ids, rng)
                    instances.append(Instance(input_ids, segment_ids, positions, labels, is_random_next))
                chunk, length = [], 0
            i += 1
        return instances

    def mask(self, input_ids, rng):
        """(masked ids, sorted positions, original ids at those positions)."""
        cls_id, sep_id = self.cls_id, self.sep_id
        num_to_predict = min(self.max_predictions_per_seq, max(1, int(round(len(input_ids) * self.masked_lm_prob))))
        if self.whole_word_mask:
            candidates = []
            for i, token in enumerate(input_ids):
                if token == cls_id or token == sep_id:
                    continue
                if candidates and self.continuation[token]:
                    candidates[-1].append(i)
                else:
                    candidates.append([i])
            shuffle(candidates, rng)
            # The original also skips sets overlapping masked positions; the sets are disjoint.
            chosen = []
            for index_set in candidates:
                if len(chosen) >= num_to_predict:
                    break
                if len(chosen) + len(index_set) <= num_to_predict:
                    chosen.extend(index_set)
        else:
            # Single positions: the original's loop takes the first num_to_predict of them.
            candidates = [i for i, token in enumerate(input_ids) if token != cls_id and token != sep_id]
            shuffle(candidates, rng)
            chosen = candidates[:num_to_predict]
        output = list(input_ids)
        for index in chosen:
            if rng.random() < 0.8:
                output[index] = self.mask_id
            elif rng.random() >= 0.5:
                output[index] = rng.randint(0, self.vocab_size - 1)
        masked = sorted(chosen)
        return output, masked, [input_ids[i] for i in masked]


def shuffle(items, rng):
    """`rng.shuffle(items)`: the same draws (CPython's Fisher-Yates on `getrandbits`), twice as fast.

    The tests hold it to `random.Random.shuffle`.
    """
    getrandbits = rng.getrandbits
    i = len(items) - 1
    while i > 0:
        bits = (i + 1).bit_length()
        lowest = max((1 << (bits - 1)) - 1, 1)  # the i below this one draw with fewer bits
        for i in range(i, lowest - 1, -1):  # noqa: B020 (i continues below the loop)
            j = getrandbits(bits)
            while j > i:
                j = getrandbits(bits)
            items[i], items[j] = items[j], items[i]
        i = lowest - 1


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Cuts the longer segment, one token at a time from its front or back at random.

    The original's draws, one per token cut; the cuts themselves are made once at the
    end, so a huge segment (a very long line) costs time linear in its length.
    """
    length = [len(tokens_a), len(tokens_b)]
    front, back = [0, 0], [0, 0]
    while length[0] + length[1] > max_num_tokens:
        longer = 0 if length[0] > length[1] else 1
        if rng.random() < 0.5:
            front[longer] += 1
        else:
            back[longer] += 1
        length[longer] -= 1
    for tokens, cut_front, cut_back in ((tokens_a, front[0], back[0]), (tokens_b, front[1], back[1])):
        del tokens[len(tokens) - cut_back :]
        del tokens[:cut_front]


def _check_fits(instance, max_seq_length, max_predictions_per_seq):
    """(tokens, predictions) of an instance, which must fit the padded features."""
    n, p = len(instance.input_ids), len(instance.masked_lm_positions)
    if n > max_seq_length or p > max_predictions_per_seq:
        raise ValueError(
            f"instance of {n} tokens / {p} predictions exceeds {max_seq_length} / {max_predictions_per_seq}"
        )
    return n, p


def instance_features(instance, max_seq_length, max_predictions_per_seq):
    """An instance -> padded numpy arrays under the original feature names."""
    n, p = _check_fits(instance, max_seq_length, max_predictions_per_seq)

    def pad(values, size, dtype):
        array = np.zeros(size, dtype)
        array[: len(values)] = values
        return array

    return {
        "input_ids": pad(instance.input_ids, max_seq_length, np.int64),
        "input_mask": pad([1] * n, max_seq_length, np.int64),
        "segment_ids": pad(instance.segment_ids, max_seq_length, np.int64),
        "masked_lm_positions": pad(instance.masked_lm_positions, max_predictions_per_seq, np.int64),
        "masked_lm_ids": pad(instance.masked_lm_ids, max_predictions_per_seq, np.int64),
        "masked_lm_weights": pad([1.0] * p, max_predictions_per_seq, np.float32),
        "next_sentence_labels": np.array([1 if instance.is_random_next else 0], np.int64),
    }


def _varint(value):
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINTS = [_varint(i) for i in range(1 << 16)]
_FLOAT_ONE = np.float32(1.0).tobytes()  # little-endian, as protobuf stores floats


def _packed(values, pad):
    """Packed varints of non-negative ints, then `pad` zeros."""
    table = _VARINTS
    body = b"".join([table[v] if v < 65536 else _varint(v) for v in values])
    return body + bytes(pad)


def _field(number, payload):
    """A length-delimited protobuf field."""
    size = len(payload)
    return _VARINTS[number << 3 | 2] + (_VARINTS[size] if size < 65536 else _varint(size)) + payload


@functools.cache
def _feature_prefix(name, kind, size):
    """The bytes of Features entry {name: Feature(kind: packed values of `size` bytes)} before the values."""
    entry = _field(1, _field(1, name.encode()) + _field(2, _field(kind, _field(1, bytes(size)))))
    return entry[: len(entry) - size]


def serialize_instance(instance, max_seq_length, max_predictions_per_seq):
    """An instance -> a tf.train.Example in the original layout.

    Encoded directly (four times faster than building the proto), with the bytes of
    `SerializeToString(deterministic=True)`: features in key order, so the same
    instance gives the same record in every process.
    """
    n, p = _check_fits(instance, max_seq_length, max_predictions_per_seq)
    pad, pad_predictions = max_seq_length - n, max_predictions_per_seq - p
    int64_list, float_list = 3, 2  # Feature's fields
    features = (  # in key order
        ("input_ids", int64_list, _packed(instance.input_ids, pad)),
        ("input_mask", int64_list, b"\x01" * n + bytes(pad)),
        ("masked_lm_ids", int64_list, _packed(instance.masked_lm_ids, pad_predictions)),
        ("masked_lm_positions", int64_list, _packed(instance.masked_lm_positions, pad_predictions)),
        ("masked_lm_weights", float_list, _FLOAT_ONE * p + bytes(4 * pad_predictions)),
        ("next_sentence_labels", int64_list, b"\x01" if instance.is_random_next else b"\x00"),
        ("segment_ids", int64_list, bytes(instance.segment_ids) + bytes(pad)),
    )
    return _field(1, b"".join([_feature_prefix(name, kind, len(values)) + values for name, kind, values in features]))


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
