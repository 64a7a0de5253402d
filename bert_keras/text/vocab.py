"""WordPiece vocabulary building on the tokenizer's own normalisation.

Words are counted after exactly the normalisation and splitting that
`BertTokenizer` applies (`words.split_words`, plain Python: no TensorFlow to start),
so every learned piece is one the tokenizer can produce. The piece selection is
tf.text's WordPiece learner (`wordpiece_tokenizer_learner_lib.learn`, the algorithm
behind `bert_vocab_from_dataset`), run by `wordpiece_learner`: the same vocabulary, faster.
Only remote paths (gs://...) and `check_vocabulary` load TensorFlow.
"""

import collections
import concurrent.futures
import multiprocessing
import os
import sys

import numpy as np

from bert_keras.text.wordpiece_learner import WordPieceLearner
from bert_keras.text.words import split_words

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
    from bert_keras.text.tokenizer import load_vocabulary  # TensorFlow: not for counting words

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
        size = _size(path)
        parts += [(path, start, min(start + part_bytes, size)) for start in range(0, size, part_bytes)]
    return parts


def _size(path):
    if "://" not in path:
        return os.path.getsize(path)
    import tensorflow as tf  # gs://, hdfs://, ...: TensorFlow's file systems

    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"corpus file not found: {path}")
    return tf.io.gfile.stat(path).length


def _open(path, mode):
    if "://" not in path:
        return open(path, mode)
    import tensorflow as tf

    return tf.io.gfile.GFile(path, mode)


def read_part(path, start, end):
    """The bytes of the lines of `path` that start in [start, end)."""
    with _open(path, "rb") as file:
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


def count_part(part, lower_case=True, chunk_bytes=1 << 20):
    """{word: count} of a corpus part, normalised as the tokenizer does (`split_words`),
    a line-aligned chunk of about `chunk_bytes` at a time (a bound on the words in memory)."""
    data = read_part(*part)
    counts = collections.Counter()
    begin = 0
    while begin < len(data):
        end = data.find(b"\n", begin + chunk_bytes) + 1 or len(data)
        counts.update(split_words(data[begin:end].decode("utf-8", "replace"), lower_case))
        begin = end
    return dict(counts)


class WordCounts(collections.Counter):
    """Word counts. `floor` is 0 when they are exact; when `count_words` pruned rare
    words (`max_words`), every word seen more than `floor` times is in, its count at
    most `floor` short, and a word seen at most `floor` times may be missing."""

    floor = 0


def count_words(files, lower_case=True, progress=None, workers=1, part_bytes=PART_BYTES, max_words=None):
    """`WordCounts` over the lines of `files` (normalised as the tokenizer does), by
    this process or `workers` processes, a part of `part_bytes` at a time: the same
    counts either way. `progress(bytes_read, total_bytes, distinct_words)` is called
    per part.

    `max_words` bounds memory: after adding a part's counts, if more than `max_words`
    distinct words are held, the rarest are dropped (lossy counting, Manku and Motwani
    2002): each word carries the most it may have been seen before it was last added
    (the floor then), and the floor rises to the smallest count that leaves at most
    `max_words` words, whose count plus carry is above it. The result's `floor` says
    what that costs (`WordCounts`); None (default) counts exactly."""
    parts = corpus_parts(list(files), part_bytes)
    total = sum(end - start for _, start, end in parts)
    counts, carried = WordCounts(), {}
    done = 0
    for part, part_counts in _count_parts(parts, lower_case, workers):
        if counts.floor:  # words (re-)entering now may have been dropped before, seen up to `floor` times
            carried.update(dict.fromkeys(part_counts.keys() - counts.keys(), counts.floor))
        counts.update(part_counts)
        if max_words is not None and len(counts) > max_words:
            _prune(counts, carried, max_words)
        done += part[2] - part[1]
        if progress is not None:
            progress(done, total, len(counts))
    return counts


def _prune(counts, carried, max_words):
    """Raises `counts.floor` to leave at most `max_words` words whose count plus carry is above it,
    and drops the others."""
    words = list(counts)
    bounds = np.fromiter((counts[word] + carried.get(word, 0) for word in words), np.int64, len(words))
    counts.floor = max(counts.floor, int(np.partition(bounds, len(words) - max_words - 1)[len(words) - max_words - 1]))
    for index in np.flatnonzero(bounds <= counts.floor):
        del counts[words[index]]
        carried.pop(words[index], None)


def _count_parts(parts, lower_case, workers):
    """Yields (part, its counts) as parts are counted."""
    if workers <= 1 or len(parts) <= 1:
        yield from ((part, count_part(part, lower_case)) for part in parts)
        return
    # Forked: a worker starts at once and counts in plain Python. Spawned where TensorFlow
    # is loaded (it is not fork-safe): the workers then import it again.
    context = multiprocessing.get_context("spawn" if "tensorflow" in sys.modules else "fork")
    pool = concurrent.futures.ProcessPoolExecutor(min(workers, len(parts)), context)
    try:
        futures = {pool.submit(count_part, part, lower_case): part for part in parts}
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
    with _open(path, "wb") as vocab_file:
        vocab_file.write("".join(f"{token}\n" for token in vocabulary).encode("utf-8"))
