"""WordPiece vocabulary building on the tokenizer's own normalisation.

Words are counted after exactly the normalisation and splitting that
`BertTokenizer` applies (`tokenizer.split_words`), so every learned piece is
one the tokenizer can produce. The piece selection is tf.text's WordPiece
learner (`wordpiece_tokenizer_learner_lib.learn`), the algorithm behind
`bert_vocab_from_dataset`.
"""

import collections

import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib

from bert_keras.text.tokenizer import split_words

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")


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
    for batch_index, words in enumerate(dataset.prefetch(tf.data.AUTOTUNE)):
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
    word_counts = list(word_counts.items())
    # The learner searches a count threshold for `size`; on small corpora even
    # its lowest threshold can overshoot, so raise the floor until it fits.
    for min_count in range(min_count, min_count + 100):
        vocabulary = wordpiece_tokenizer_learner_lib.learn(
            word_counts,
            vocab_size=size,
            reserved_tokens=reserved,
            lower_thresh=min_count,
            upper_thresh=max(upper, min_count + 1),
            max_unique_chars=max_unique_chars,
            include_joiner_token=True,  # i.e. "##" suffix pieces
        )
        if len(vocabulary) <= size:
            return vocabulary
    raise ValueError(
        f"Could not fit a vocabulary into {size} tokens (the smallest had {len(vocabulary)}); "
        "increase the size or lower max_unique_chars."
    )


def write_vocabulary(vocabulary, path):
    with tf.io.gfile.GFile(path, "w") as vocab_file:
        vocab_file.write("".join(f"{token}\n" for token in vocabulary))
