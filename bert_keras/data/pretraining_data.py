"""Pre-training data: the original create_pretraining_data.py recipe, its TFRecords, tf.data.

Static data (`create_pretraining_data` -> TFRecords, `pretraining_dataset` to read them)
follows google-research/bert step for step: the same random-number calls in the same
order on a `random.Random(seed)`, so the same documents give the same instances as the
original tool (WordPiece ids come from the in-graph `BertTokenizer`, which equals the
original tokenizer). `dynamic_masking_dataset` builds instances from text on the fly and
draws new A/B pairings and new masks every epoch.

Two document formats are read:
- "lines": one sentence per line, a blank line between documents (the original format,
  e.g. sample_text.txt).
- "prose": paragraphs separated by blank lines, lines wrapped anywhere (Project
  Gutenberg). Paragraphs are split into sentences by `split_sentences`; a heading
  paragraph (CHAPTER/BOOK/VOLUME/PART ..., or a Roman numeral "IV. Title") starts a new
  document and is dropped, as are bracketed title lines such as "[Emma by Jane Austen]".
"""

import collections
import glob
import random
import re
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

# The original tool's TFRecord features. masked_lm_weights is the only float feature.
INT_FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids")
# TFRecord name -> model feature name (the encoder's TF Hub style inputs).
MODEL_NAMES = {"input_ids": "input_word_ids", "segment_ids": "input_type_ids"}

Instance = collections.namedtuple(
    "Instance", ["input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids", "is_random_next"]
)

_HEADING = re.compile(r"^(?:(?:CHAPTER|Chapter|BOOK|Book|VOLUME|Volume|PART|Part)\b|[IVXLC]+\.\s|[IVXLC]+$)")
_TITLE = re.compile(r"^\[.*\]$")
# A sentence ends at . ! or ? (plus closing quotes/brackets) followed by space and a
# capital, digit or opening quote. Abbreviations and initials do not end sentences.
_SENTENCE_END = re.compile(r"""[.!?]+["'\u2019\u201d)\]_]*\s+(?=["'\u2018\u201c(\[_]*[A-Z0-9])""")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st mt jr sr prof rev gen col capt lt sgt hon esq vs etc no vol ch fig cf e.g i.e".split()
)


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
    text = Path(path).read_bytes().decode("utf-8", errors="ignore")  # as the original reader
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
    elif format == "prose":
        documents = [[]]
        for paragraph in re.split(r"\n\s*\n", text):
            paragraph = paragraph.strip()
            if not paragraph or _TITLE.match(paragraph):
                continue
            if "\n" not in paragraph and _HEADING.match(paragraph) and not paragraph.endswith((".", "!", "?", '"')):
                documents.append([])
                continue
            documents[-1].extend(split_sentences(paragraph))
    else:
        raise ValueError(f"document format must be 'auto', 'lines' or 'prose', got {format!r}")
    return [document for document in documents if document]


def detect_format(text):
    """'prose' when most non-blank lines are wrapped text (no sentence end), else 'lines'."""
    lines = [line.strip() for line in text.splitlines()[:2000] if line.strip()]
    if not lines:
        return "lines"
    ending = sum(line.endswith((".", "!", "?", '"', "'", "\u201d")) for line in lines)
    return "lines" if ending >= 0.5 * len(lines) else "prose"


def expand_files(patterns):
    """Glob patterns (or a comma-separated string) -> sorted, de-duplicated files, or an error."""
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(str(pattern))) or ([str(pattern)] if Path(pattern).is_file() else [])
        if not matches:
            raise FileNotFoundError(f"no input files match {pattern}")
        files.extend(m for m in matches if m not in files)
    return files


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

    def instances(self, documents, dupe_factor, rng):
        """create_training_instances after reading: shuffle documents, dupe, shuffle instances."""
        documents = list(documents)
        rng.shuffle(documents)
        instances = []
        for _ in range(dupe_factor):
            for index in range(len(documents)):
                instances.extend(self.from_document(documents, index, rng))
        rng.shuffle(instances)
        return instances

    def from_document(self, documents, document_index, rng, mask=True):
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
                    if mask:
                        input_ids, positions, labels = self.mask(input_ids, rng)
                    else:
                        positions, labels = [], []
                    instances.append(Instance(input_ids, segment_ids, positions, labels, is_random_next))
                chunk, length = [], 0
            i += 1
        return instances

    def mask(self, input_ids, rng):
        """(masked ids, sorted positions, original ids at those positions)."""
        candidates = []
        for i, token in enumerate(input_ids):
            if token == self.cls_id or token == self.sep_id:
                continue
            if self.whole_word_mask and candidates and self.continuation[token]:
                candidates[-1].append(i)
            else:
                candidates.append([i])
        rng.shuffle(candidates)
        output = list(input_ids)
        num_to_predict = min(
            self.max_predictions_per_seq, max(1, int(round(len(input_ids) * self.masked_lm_prob)))
        )
        masked, covered = [], set()
        for index_set in candidates:
            if len(masked) >= num_to_predict:
                break
            if len(masked) + len(index_set) > num_to_predict:
                continue
            if any(index in covered for index in index_set):
                continue
            for index in index_set:
                covered.add(index)
                if rng.random() < 0.8:
                    replacement = self.mask_id
                elif rng.random() < 0.5:
                    replacement = input_ids[index]
                else:
                    replacement = rng.randint(0, self.vocab_size - 1)
                output[index] = replacement
                masked.append(index)
        masked.sort()
        return output, masked, [input_ids[i] for i in masked]


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Cuts the longer segment, one token at a time from its front or back at random."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def instance_features(instance, max_seq_length, max_predictions_per_seq):
    """An instance -> padded numpy arrays under the original feature names."""
    n, p = len(instance.input_ids), len(instance.masked_lm_positions)
    if n > max_seq_length or p > max_predictions_per_seq:
        raise ValueError(f"instance of {n} tokens / {p} predictions exceeds {max_seq_length} / {max_predictions_per_seq}")

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


def serialize_instance(instance, max_seq_length, max_predictions_per_seq):
    features = instance_features(instance, max_seq_length, max_predictions_per_seq)
    feature = {
        name: tf.train.Feature(float_list=tf.train.FloatList(value=value))
        if name == "masked_lm_weights"
        else tf.train.Feature(int64_list=tf.train.Int64List(value=value))
        for name, value in features.items()
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def shard_names(output, num_shards):
    """`output` itself for one shard, else `output-00000-of-00004` ... ."""
    if num_shards <= 1:
        return [str(output)]
    return [f"{output}-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)]


def create_pretraining_data(
    input_files,
    output_files,
    tokenizer,
    max_seq_length=128,
    max_predictions_per_seq=20,
    masked_lm_prob=0.15,
    short_seq_prob=0.1,
    dupe_factor=10,
    whole_word_mask=False,
    random_seed=12345,
    format="auto",
    progress=True,
):
    """Reads, tokenizes, makes instances and writes them round-robin to `output_files`.

    Returns the number of instances written. Defaults are the original tool's.
    """
    log = (lambda message: print(message, file=sys.stderr, flush=True)) if progress else (lambda _: None)
    rng = random.Random(random_seed)
    documents = []
    for i, path in enumerate(input_files):
        found = read_documents(path, format)
        documents.extend(found)
        log(f"read {i + 1}/{len(input_files)} {path}: {len(found)} documents")
    tokenized = tokenize_documents(documents, tokenizer)
    if len(tokenized) < 2:
        raise ValueError(f"need at least 2 non-empty documents for next-sentence pairs, got {len(tokenized)}")
    log(f"tokenized {sum(len(d) for d in tokenized)} sentences in {len(tokenized)} documents")
    maker = InstanceMaker(
        tokenizer.vocabulary,
        max_seq_length=max_seq_length,
        short_seq_prob=short_seq_prob,
        masked_lm_prob=masked_lm_prob,
        max_predictions_per_seq=max_predictions_per_seq,
        whole_word_mask=whole_word_mask,
    )
    instances = maker.instances(tokenized, dupe_factor, rng)
    for path in output_files:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    writers = [tf.io.TFRecordWriter(str(path)) for path in output_files]
    bar = None
    if progress:
        import keras

        bar = keras.utils.Progbar(len(instances), unit_name="instance")
    for i, instance in enumerate(instances):
        writers[i % len(writers)].write(serialize_instance(instance, max_seq_length, max_predictions_per_seq))
        if bar is not None and (i + 1) % 1000 == 0:
            bar.update(i + 1)
    for writer in writers:
        writer.close()
    if bar is not None:
        bar.update(len(instances), finalize=True)
    log(f"wrote {len(instances)} instances to {len(output_files)} file(s)")
    return len(instances)


def parse_example(serialized, max_seq_length, max_predictions_per_seq):
    """One serialized original-format example -> the model's feature dict (int32)."""
    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in INT_FEATURES[:3]}
    spec.update(
        {name: tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64) for name in INT_FEATURES[3:]}
    )
    spec["masked_lm_weights"] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32)
    spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
    parsed = tf.io.parse_single_example(serialized, spec)
    return {
        MODEL_NAMES.get(name, name): value if value.dtype == tf.float32 else tf.cast(value, tf.int32)
        for name, value in parsed.items()
    }


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
    dataset = dataset.map(
        lambda record: parse_example(record, max_seq_length, max_predictions_per_seq),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    dataset = dataset.batch(batch_size, drop_remainder=True)
    if skip_batches:
        dataset = dataset.skip(skip_batches)
    return dataset.prefetch(tf.data.AUTOTUNE)


def dynamic_masking_dataset(
    input_files,
    tokenizer,
    batch_size,
    max_seq_length=128,
    max_predictions_per_seq=20,
    masked_lm_prob=0.15,
    short_seq_prob=0.1,
    whole_word_mask=False,
    seed=0,
    format="auto",
    skip_batches=0,
):
    """An endless dataset of the model's feature dict made from raw text.

    The text is read and tokenized once (in-graph tokenizer, in large batches); each
    epoch then re-runs the recipe with `random.Random((seed, epoch))`, so A/B pairs,
    random-next documents, short lengths and masks are all new every epoch and the
    whole stream is reproducible (a resumed run can `skip_batches`).
    """
    documents = [d for path in expand_files(input_files) for d in read_documents(path, format)]
    tokenized = tokenize_documents(documents, tokenizer)
    if len(tokenized) < 2:
        raise ValueError(f"need at least 2 non-empty documents for next-sentence pairs, got {len(tokenized)}")
    maker = InstanceMaker(
        tokenizer.vocabulary,
        max_seq_length=max_seq_length,
        short_seq_prob=short_seq_prob,
        masked_lm_prob=masked_lm_prob,
        max_predictions_per_seq=max_predictions_per_seq,
        whole_word_mask=whole_word_mask,
    )

    def generate():
        epoch = 0
        while True:
            rng = random.Random(f"{seed}/{epoch}")
            for instance in maker.instances(tokenized, 1, rng):
                features = instance_features(instance, max_seq_length, max_predictions_per_seq)
                yield {
                    MODEL_NAMES.get(k, k): v if v.dtype == np.float32 else v.astype(np.int32)
                    for k, v in features.items()
                }
            epoch += 1

    signature = {
        "input_word_ids": tf.TensorSpec([max_seq_length], tf.int32),
        "input_mask": tf.TensorSpec([max_seq_length], tf.int32),
        "input_type_ids": tf.TensorSpec([max_seq_length], tf.int32),
        "masked_lm_positions": tf.TensorSpec([max_predictions_per_seq], tf.int32),
        "masked_lm_ids": tf.TensorSpec([max_predictions_per_seq], tf.int32),
        "masked_lm_weights": tf.TensorSpec([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": tf.TensorSpec([1], tf.int32),
    }
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    if skip_batches:
        dataset = dataset.skip(skip_batches)
    return dataset.prefetch(tf.data.AUTOTUNE)
