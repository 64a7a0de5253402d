"""WordPiece vocabulary building on the tokenizer's own normalisation.

Words are counted after exactly the normalisation and splitting that
`BertTokenizer` applies (`tokenizer.split_words`), so every learned piece is
one the tokenizer can produce. The piece selection is tf.text's WordPiece
learner (`wordpiece_tokenizer_learner_lib.learn`, the algorithm behind
`bert_vocab_from_dataset`), run by `wordpiece_learner`: the same vocabulary, faster.
"""

import collections
import os

import tensorflow as tf

from bert_keras.text.tokenizer import load_vocabulary, split_words
from bert_keras.text.wordpiece_learner import WordPieceLearner

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Rows a checkpoint's embedding table may have beyond its vocab.txt: tables padded to a
# multiple of 8..128 for faster matmuls (NVIDIA's BERT: 30522 tokens, 30528 rows).
TABLE_PADDING = 128


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


def count_words(files, lower_case=True, batch_size=1024, progress=None):
    """Word counts over the lines of `files` (normalised as the tokenizer
    does). `progress(lines_read, distinct_words)` is called per batch."""
    counts = collections.Counter()
    lines_read = 0
    dataset = tf.data.TextLineDataset(list(files)).batch(batch_size)
    dataset = dataset.map(lambda text: split_words(text, lower_case), num_parallel_calls=tf.data.AUTOTUNE)
    for words in dataset.prefetch(tf.data.AUTOTUNE):
        counts.update(word.decode("utf-8") for word in words.flat_values.numpy())
        lines_read += int(words.nrows())
        if progress is not None:
            progress(lines_read, len(counts))
    return counts


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
