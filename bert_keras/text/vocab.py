"""WordPiece vocabulary building on the tokenizer's own normalisation.

Words are counted after exactly the normalisation and splitting that
`BertTokenizer` applies (`tokenizer.split_words`), so every learned piece is
one the tokenizer can produce. The piece selection is tf.text's WordPiece
learner (`wordpiece_tokenizer_learner_lib.learn`, the algorithm behind
`bert_vocab_from_dataset`), run by `wordpiece_learner`: the same vocabulary, faster.
"""

import collections
import concurrent.futures
import multiprocessing
import os

import tensorflow as tf

from bert_keras.text.tokenizer import load_vocabulary, split_words
from bert_keras.text.wordpiece_learner import WordPieceLearner

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Rows a checkpoint's embedding table may have beyond its vocab.txt: tables padded to a
# multiple of 8..128 for faster matmuls (NVIDIA's BERT: 30522 tokens, 30528 rows).
TABLE_PADDING = 128
# Bytes of corpus per unit of counting work: the parts a --workers pool or Beam shares out.
PART_BYTES = 16 << 20


class VocabularyMismatch(ValueError):
    """A vocabulary that does not fit the checkpoint it is used with."""


def check_vocabulary(vocab, vocab_size, checkpoint, checkpoint_vocab=None):
    """Raises `VocabularyMismatch`, naming both sides, unless `vocab` fits a checkpoint
    whose embedding table has `vocab_size` rows and, when known, whose own vocabulary
    (a vocab.txt beside it, or the one saved inside a `.keras` model) is `checkpoint_vocab`.

    `vocab` and `checkpoint_vocab` are vocab.txt paths or token lists. A vocabulary
    with more tokens than rows would index past the table (an error at the first step),
    and one that differs from the checkpoint's maps every word to ids that meant other
    words in pre-training: the model trains, to chance, without a word.
    """
    tokens = load_vocabulary(vocab)
    name = _vocabulary_name(vocab, checkpoint)
    if checkpoint_vocab is not None:
        own = load_vocabulary(checkpoint_vocab)
        if tokens != own:
            line = next((i for i, (a, b) in enumerate(zip(tokens, own)) if a != b), min(len(tokens), len(own)))
            where = (
                f"line {line + 1} is {_token(tokens, line)} in one and {_token(own, line)} in the other"
                if tokens[: len(own)] != own[: len(tokens)]
                else "one is a prefix of the other"
            )
            raise VocabularyMismatch(
                f"{name} ({len(tokens)} tokens) is not the vocabulary of the checkpoint {checkpoint} "
                f"({_vocabulary_name(checkpoint_vocab, checkpoint)}, {len(own)} tokens): {where}. "
                "Use the checkpoint's own vocab.txt (leave out --vocab)"
            )
    if len(tokens) > vocab_size or len(tokens) + TABLE_PADDING <= vocab_size:
        raise VocabularyMismatch(
            f"{name} has {len(tokens)} tokens but the checkpoint {checkpoint} has vocab_size={vocab_size}: "
            "it was not trained with this vocabulary; use the vocab.txt it was trained with"
        )
    return tokens


def _vocabulary_name(vocab, checkpoint):
    if isinstance(vocab, (str, os.PathLike)):
        return os.fspath(vocab)
    return f"the vocabulary saved in {checkpoint}"


def _token(tokens, line):
    return repr(tokens[line]) if line < len(tokens) else "missing"


def reserved_tokens(num_unused=0):
    """`[PAD]`, `[unused0]`..., then `[UNK] [CLS] [SEP] [MASK]`: the layout of
    the original BERT vocabularies (there with 99 unused slots first)."""
    return ["[PAD]"] + [f"[unused{i}]" for i in range(num_unused)] + list(SPECIAL_TOKENS)


def corpus_parts(files, part_bytes=PART_BYTES):
    """The units of counting work: (path, start, end) byte ranges of `files`; a part
    counts the lines that start in its range, so the parts count every line once."""
    parts = []
    for path in files:
        size = tf.io.gfile.stat(path).length
        parts += [(path, start, min(start + part_bytes, size)) for start in range(0, size, part_bytes)]
    return parts


def read_part(path, start, end):
    """The bytes of the lines of `path` that start in [start, end)."""
    with tf.io.gfile.GFile(path, "rb") as file:
        file.seek(max(start - 1, 0))
        data = file.read(end - start + (start > 0))
        if start > 0:  # the line begun before `start` is the previous part's
            first = data.find(b"\n")
            data = data[first + 1 :] if first >= 0 else b""
        if data and not data.endswith(b"\n"):
            data += file.readline()
    nul = data.find(b"\0")
    if nul >= 0:  # text is never NUL; invalid UTF-8 is read as U+FFFD, as the tokenizer does
        raise ValueError(f"{path}: not a text file: a NUL byte near offset {start + nul}; a binary file?")
    return data


class PartCounter:
    """Word counts of corpus parts, normalised as the tokenizer does (`split_words`)."""

    def __init__(self, lower_case=True, batch_size=1024):
        self.batch_size = batch_size
        self.split = tf.function(
            lambda text: split_words(text, lower_case).flat_values, input_signature=[tf.TensorSpec([None], tf.string)]
        )

    def __call__(self, part):
        counts = collections.Counter()
        lines = read_part(*part).split(b"\n")
        for begin in range(0, len(lines), self.batch_size):
            counts.update(self.split(tf.constant(lines[begin : begin + self.batch_size])).numpy().tolist())
        return {word.decode("utf-8"): count for word, count in counts.items()}


def _worker_init(lower_case, batch_size):
    global _worker_counter
    _worker_counter = PartCounter(lower_case, batch_size)


def _worker_count(part):
    return _worker_counter(part)


def count_words(files, lower_case=True, batch_size=1024, progress=None, workers=1, part_bytes=PART_BYTES):
    """Word counts over the lines of `files` (normalised as the tokenizer does), by
    this process or `workers` processes, a part of `part_bytes` at a time: the same
    counts either way. `progress(bytes_read, total_bytes, distinct_words)` is called
    per part."""
    parts = corpus_parts(list(files), part_bytes)
    total = sum(end - start for _, start, end in parts)
    counts = collections.Counter()
    done = 0
    for part, part_counts in _count_parts(parts, lower_case, batch_size, workers):
        counts.update(part_counts)
        done += part[2] - part[1]
        if progress is not None:
            progress(done, total, len(counts))
    return counts


def _count_parts(parts, lower_case, batch_size, workers):
    """Yields (part, its counts) as parts are counted."""
    if workers <= 1 or len(parts) <= 1:
        counter = PartCounter(lower_case, batch_size)
        yield from ((part, counter(part)) for part in parts)
        return
    # Spawned: TensorFlow is not fork-safe (as in data/pretraining_shards.make_shards).
    pool = concurrent.futures.ProcessPoolExecutor(
        min(workers, len(parts)), multiprocessing.get_context("spawn"), _worker_init, (lower_case, batch_size)
    )
    try:
        futures = {pool.submit(_worker_count, part): part for part in parts}
        for future in concurrent.futures.as_completed(futures):
            yield futures[future], future.result()
    except concurrent.futures.BrokenExecutor as error:
        raise RuntimeError("a word-counting worker process died (killed, or out of memory?)") from error
    finally:
        pool.shutdown(cancel_futures=True)


def build_vocabulary(word_counts, size, num_unused=0, max_unique_chars=1000, min_count=1):
    """Learns a WordPiece vocabulary of at most `size` tokens (reserved tokens
    included) from `{word: count}`."""
    reserved = reserved_tokens(num_unused)
    if size <= len(reserved):
        raise ValueError(f"Vocabulary size {size} leaves no room beyond the {len(reserved)} reserved tokens.")
    if not word_counts:
        raise ValueError("No words to learn a vocabulary from: the corpus is empty.")
    # The learner binary-searches a count threshold up to `upper_thresh` (default 1e7);
    # no threshold above the largest count changes the result, so search only up to it.
    upper = max(word_counts.values()) + 1
    learner = WordPieceLearner(word_counts, reserved, max_unique_chars=max_unique_chars)
    # The learner searches a count threshold for `size`; on small corpora even
    # its lowest threshold can overshoot, so raise the floor until it fits.
    for floor in range(min_count, min_count + 100):
        vocabulary = learner.learn(size, lower_thresh=floor, upper_thresh=max(upper, floor + 1))
        if len(vocabulary) <= size:
            return vocabulary
    raise ValueError(
        f"Could not fit a vocabulary into {size} tokens (the smallest had {len(vocabulary)}); "
        "increase the size or lower max_unique_chars."
    )


def write_vocabulary(vocabulary, path):
    with tf.io.gfile.GFile(path, "w") as vocab_file:
        vocab_file.write("".join(f"{token}\n" for token in vocabulary))
