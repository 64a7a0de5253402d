"""The graph ops of `BertTokenizer` (text/tokenizer.py describes how they follow the original
tokenizer), traced once per process for each vocabulary and settings."""

import functools

import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.text.fast_wordpiece import fast_wordpiece_tokenizer

# Rows matching this need no Unicode processing and no cleaning.
_FAST_PATH_PATTERN = r"[\t\n\r\x20-\x7e]*"
# U+FFFD and everything that is neither an assigned L/M/N/P/S/Z character nor
# one of tab, newline, carriage return, i.e. the original's control and format
# characters, private use, surrogates and unassigned code points.
_SEPARATOR = "\u2063"  # INVISIBLE SEPARATOR: a Cf character, removed by cleaning.
_REMOVED_PATTERN = r"\x{FFFD}|[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Z}\t\n\r\x{2063}]"
_MAX_BYTES_PER_CHAR = 4


def word_piece_graph(vocabulary, lower_case, max_chars_per_word, max_input_bytes, unk_token, unk_id):
    """The process's `WordPieceGraph` for these settings; a new one when not made eagerly
    (its constants would belong to that graph)."""
    settings = (lower_case, max_chars_per_word, max_input_bytes, unk_token, unk_id)
    with tf.init_scope():
        if tf.executing_eagerly():
            return _shared_word_piece_graph(tuple(vocabulary), *settings)
    return WordPieceGraph(vocabulary, *settings)


@functools.lru_cache(maxsize=16)
def _shared_word_piece_graph(vocabulary, *settings):
    return WordPieceGraph(vocabulary, *settings)


class WordPieceGraph:
    """Strings -> pieces as one `tf.function`, traced once per process for a vocabulary and
    settings. Its graph has about 700 nodes and took 0.23 CPU-s to trace, and every
    `tf.data` pipeline, predict function and export of every model that holds a tokenizer
    traced it again; in those it is now one call of this function."""

    def __init__(self, vocabulary, lower_case, max_chars_per_word, max_input_bytes, unk_token, unk_id):
        vocabulary = list(vocabulary)
        self.lower_case = lower_case
        self.max_chars_per_word = max_chars_per_word
        self.max_input_bytes = max_input_bytes
        self.unk_id = unk_id
        # In ASCII text a character is a byte, so FastWordpiece's byte limit is
        # the original's character limit. Other text gets a limit large enough
        # for any word of `max_chars_per_word` characters, then long words are
        # found by their character count (`_unk_long_words`).
        self._ascii_wordpiece = fast_wordpiece_tokenizer(vocabulary, max_chars_per_word, unk_token, tf.int32)
        self._wordpiece = fast_wordpiece_tokenizer(
            vocabulary, _MAX_BYTES_PER_CHAR * max_chars_per_word, unk_token, tf.int32
        )
        is_suffix = [token.startswith("##") and len(token) > 2 for token in vocabulary]
        chars = [len(token) - 2 if suffix else len(token) for token, suffix in zip(vocabulary, is_suffix)]
        self.vocabulary = tf.constant(vocabulary)
        self.is_suffix = tf.constant(is_suffix)
        self._piece_chars = tf.constant(chars, tf.int32)
        self.tokenize_with_offsets = tf.function(
            self._tokenize_with_offsets, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False
        )

    def _tokenize_with_offsets(self, text):
        if self.max_input_bytes is not None:
            text = tf.strings.substr(text, 0, self.max_input_bytes, unit="BYTE")
        fast = tf.strings.regex_full_match(text, _FAST_PATH_PATTERN)
        return ragged_cond(
            tf.reduce_all(fast),
            lambda: self._tokenize_ascii(text),
            lambda: self._tokenize_mixed(text, fast),
        )

    def _tokenize_mixed(self, text, fast):
        fast_rows = tf.where(fast)[:, 0]
        slow_rows = tf.where(tf.logical_not(fast))[:, 0]
        fast_result = self._tokenize_ascii(tf.gather(text, fast_rows))
        slow_result = self._unk_long_words(*self._tokenize_unicode(tf.gather(text, slow_rows)))
        order = tf.math.invert_permutation(tf.concat([fast_rows, slow_rows], axis=0))
        return tuple(
            tf.gather(tf.concat([fast_part, slow_part], axis=0), order)
            for fast_part, slow_part in zip(fast_result, slow_result)
        )

    def _tokenize_ascii(self, text):
        if self.lower_case:
            text = tf.strings.lower(text)
        return self._ascii_wordpiece.tokenize_with_offsets(text)

    def _tokenize_unicode(self, text):
        chars, char_starts = tf.strings.unicode_decode_with_offsets(
            text, "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        # Normalise each character separately, joined by a separator that is a
        # case-ignorable format character, so the final-sigma rule of
        # lower-casing sees the same context as in the original.
        # The separator is itself a format character, which cleaning removes.
        codepoints = tf.where(chars.flat_values == ord(_SEPARATOR), 0xFFFD, chars.flat_values)
        separators = tf.fill(tf.shape(codepoints), ord(_SEPARATOR))
        interleaved = tf.RaggedTensor.from_row_splits(
            tf.reshape(tf.stack([codepoints, separators], axis=1), [-1]),
            chars.row_splits * 2,
            validate=False,
        )
        separated = tf.strings.unicode_encode(interleaved, "UTF-8")
        separated = tf.strings.regex_replace(separated, _REMOVED_PATTERN, "")
        if self.lower_case:
            separated = tf.strings.lower(separated, encoding="utf-8")
            separated = tf_text.normalize_utf8(separated, "NFD")
            separated = tf.strings.regex_replace(separated, r"\p{Mn}", "")
        char_texts = tf.strings.split(separated, sep=_SEPARATOR)[:, :-1]
        normalized = tf.strings.reduce_join(char_texts, axis=1)
        ids, norm_starts, norm_ends = self._wordpiece.tokenize_with_offsets(normalized)

        # Map normalised byte offsets back to the input characters' bytes.
        char_lengths = tf.strings.length(char_texts.flat_values)
        row_base = tf.cumsum(tf.cast(tf.strings.length(normalized), tf.int64), exclusive=True)
        char_norm_ends = tf.cumsum(tf.cast(char_lengths, tf.int64))
        piece_base = tf.gather(row_base, ids.value_rowids())
        first_char = tf.searchsorted(char_norm_ends, piece_base + norm_starts.flat_values, side="right")
        last_char = tf.searchsorted(char_norm_ends, piece_base + norm_ends.flat_values - 1, side="right")
        char_ends = _char_ends(char_starts, tf.cast(tf.strings.length(text), tf.int64))
        starts = ids.with_flat_values(tf.gather(char_starts.flat_values, first_char))
        ends = ids.with_flat_values(tf.gather(char_ends, last_char))
        return ids, starts, ends

    def _unk_long_words(self, ids, starts, ends):
        """Replaces words of more than `max_chars_per_word` characters by one
        `unk_token`, as the original does (FastWordpiece counts bytes)."""
        flat_ids = ids.flat_values
        starts_word = tf.logical_not(tf.gather(self.is_suffix, flat_ids))
        word_index = tf.cumsum(tf.cast(starts_word, tf.int32)) - 1
        num_words = tf.reduce_sum(tf.cast(starts_word, tf.int32))
        word_chars = tf.math.unsorted_segment_sum(tf.gather(self._piece_chars, flat_ids), word_index, num_words)
        long_word = word_chars > self.max_chars_per_word

        def replace():
            in_long_word = tf.gather(long_word, word_index)
            keep = tf.logical_or(starts_word, tf.logical_not(in_long_word))
            new_ids = tf.where(in_long_word, self.unk_id, flat_ids)
            word_ends = tf.math.unsorted_segment_max(ends.flat_values, word_index, num_words)
            new_ends = tf.where(in_long_word, tf.gather(word_ends, word_index), ends.flat_values)
            row_lengths = tf.math.unsorted_segment_sum(tf.cast(keep, tf.int64), ids.value_rowids(), ids.nrows())
            return (
                tf.boolean_mask(new_ids, keep),
                tf.boolean_mask(starts.flat_values, keep),
                tf.boolean_mask(new_ends, keep),
                row_lengths,
            )

        def unchanged():
            return flat_ids, starts.flat_values, ends.flat_values, ids.row_lengths()

        new_ids, new_starts, new_ends, row_lengths = tf.cond(tf.reduce_any(long_word), replace, unchanged)
        return tuple(
            tf.RaggedTensor.from_row_lengths(values, row_lengths, validate=False)
            for values in (new_ids, new_starts, new_ends)
        )


def ragged_cond(predicate, true_fn, false_fn):
    """`tf.cond` for functions returning a tuple of ragged `[batch, (n)]`
    tensors that share row partitions."""

    def flat(fn):
        def branch():
            results = fn()
            return tuple(result.flat_values for result in results) + (results[0].row_splits,)

        return branch

    *values, row_splits = tf.cond(predicate, flat(true_fn), flat(false_fn))
    return tuple(tf.RaggedTensor.from_row_splits(v, row_splits, validate=False) for v in values)


def _char_ends(char_starts, byte_lengths):
    """End byte of every character: the next character's start, or the end of
    the string for a row's last character."""
    flat_starts = char_starts.flat_values
    next_starts = tf.concat([flat_starts[1:], tf.zeros([1], flat_starts.dtype)], axis=0)
    position = tf.range(tf.size(flat_starts, out_type=tf.int64))
    rows = char_starts.value_rowids()
    is_last = tf.equal(position, tf.gather(char_starts.row_limits(), rows) - 1)
    return tf.where(is_last, tf.gather(byte_lengths, rows), next_starts)
