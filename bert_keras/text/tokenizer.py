"""In-graph WordPiece tokenizer that reproduces the original BERT tokenizer.

The original is google-research/bert `tokenization.FullTokenizer`. Every step
runs in the TensorFlow graph, so raw strings can go into `tf.data`, `model.fit`
and TF Serving. The non-core ops it uses are listed in `NON_CORE_OPS`.

How the original's steps map onto graph ops:

* Decoding: the original decodes UTF-8 with `errors="ignore"`, dropping invalid
  bytes. Here invalid bytes decode to U+FFFD, which the cleaning step removes
  (as the original removes U+FFFD), so the result is the same.
* Cleaning: NUL, U+FFFD and every character of a `C*` category except
  `\\t \\n \\r` are removed (a regex pass; unassigned code points `Cn` are matched
  as "not in any assigned category"). Whitespace (`\\t \\n \\r`, `Zs`, and the
  U+2028/U+2029 separators that Python's `str.split` also splits on) separates
  words.
* Lower-casing (uncased only): full Unicode lower-casing, as Python's
  `str.lower` (`İ` -> `i̇`, final sigma), then NFD and removal of `Mn` marks.
  Cased mode does neither.
* Splitting and WordPiece: `FastWordpieceTokenizer` in its end-to-end mode
  splits on whitespace and on BERT's punctuation and CJK characters exactly as
  the original's `BasicTokenizer` does, then runs greedy longest-match-first
  WordPiece. Words longer than `max_chars_per_word` characters become
  `unk_token`, counted in characters as the original does.

Checked exhaustively against a port of the original on every code point (in
context, both modes): identical except for code points that Python 3.11's
Unicode 14 leaves unassigned (the original drops them as `Cn`) but newer
Unicode, as used by TensorFlow's regex and ICU, assigns. The original's own
output for those depends on the Python version that runs it.

Speed: rows that are printable ASCII (plus `\\t \\n \\r`) need no Unicode work,
so they take a fast path (ASCII lower-casing + FastWordpiece) whose byte
offsets are already offsets into the input. Other rows take the exact Unicode
path, which normalises each character separately (joined by a format-character
separator, which keeps the final-sigma context) so that every piece maps back
to the bytes of the input characters it came from.
"""

import functools
import os

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.checkpoint.text_files import vocab_tokens
from bert_keras.compat import accept_raw_inputs
from bert_keras.files import decode_text
from bert_keras.text.fast_wordpiece import fast_wordpiece_tokenizer

# Ops outside core TensorFlow that a graph using this tokenizer contains.
NON_CORE_OPS = ("FastWordpieceTokenizeWithOffsets", "NormalizeUTF8")

# Rows matching this need no Unicode processing and no cleaning.
_FAST_PATH_PATTERN = r"[\t\n\r\x20-\x7e]*"
# U+FFFD and everything that is neither an assigned L/M/N/P/S/Z character nor
# one of tab, newline, carriage return, i.e. the original's control and format
# characters, private use, surrogates and unassigned code points.
_SEPARATOR = "\u2063"  # INVISIBLE SEPARATOR: a Cf character, removed by cleaning.
_REMOVED_PATTERN = r"\x{FFFD}|[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Z}\t\n\r\x{2063}]"
_MAX_BYTES_PER_CHAR = 4


def load_vocabulary(vocabulary):
    """The tokens of a vocab.txt path (each line stripped, as the original) or of a list."""
    if isinstance(vocabulary, (str, os.PathLike)):
        path = os.fspath(vocabulary)
        if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
            raise FileNotFoundError(f"no vocab file at {path}")
        with tf.io.gfile.GFile(path, "rb") as vocab_file:
            text = decode_text(vocab_file.read(), path, "vocab")
        vocabulary = vocab_tokens(text)
    vocabulary = list(vocabulary)
    if not vocabulary or not all(isinstance(token, str) for token in vocabulary):
        raise ValueError(
            "`vocabulary` must be a path to a vocab.txt or a non-empty list of "
            f"strings, got {type(vocabulary).__name__} of length {len(vocabulary)}."
        )
    return vocabulary


@keras.saving.register_keras_serializable(package="bert_keras")
class BertTokenizer(keras.layers.Layer):
    """WordPiece tokenizer with the behaviour of the original BERT tokenizer.

    Args:
        vocabulary: path of a `vocab.txt` (one token per line) or a list of
            tokens; the list is stored in the config, so a saved layer needs
            no file.
        lower_case: `True` for uncased models (lower-case, strip accents).
        max_chars_per_word: longer words become `unk_token`.
        max_input_bytes: optional cap on the bytes of each input string that
            are tokenized, bounding the work per input (e.g. for serving);
            pieces are cut at that point. `None` tokenizes everything.
        unk_token, cls_token, sep_token, pad_token, mask_token: special tokens;
            each must be in the vocabulary.

    Call: `tokenizer(strings)` with a `tf.string` tensor of shape `[batch]`,
    `[batch, 1]` or `[]`; returns int32 WordPiece ids, ragged `[batch, (pieces)]`
    (or `[pieces]` for a scalar).
    """

    def __init__(
        self,
        vocabulary,
        lower_case=True,
        max_chars_per_word=200,
        max_input_bytes=None,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        **kwargs,
    ):
        super().__init__(**kwargs)
        accept_raw_inputs(self)  # strings in, ragged ids out
        self.built = True
        self.vocabulary = load_vocabulary(vocabulary)
        self.lower_case = bool(lower_case)
        self.max_chars_per_word = int(max_chars_per_word)
        self.max_input_bytes = None if max_input_bytes is None else int(max_input_bytes)
        self.unk_token = unk_token
        self.cls_token = cls_token
        self.sep_token = sep_token
        self.pad_token = pad_token
        self.mask_token = mask_token

        self._token_to_id = {}
        for index, token in enumerate(self.vocabulary):
            self._token_to_id[token] = index  # Last duplicate wins, as in the original.
        for name in ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token"):
            token = getattr(self, name)
            if token not in self._token_to_id:
                raise ValueError(f"{name}={token!r} is not in the vocabulary.")

        self._word_piece_graph = _word_piece_graph(
            self.vocabulary, self.lower_case, self.max_chars_per_word, self.max_input_bytes, self.unk_token
        )

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    @property
    def unk_id(self):
        return self._token_to_id[self.unk_token]

    @property
    def cls_id(self):
        return self._token_to_id[self.cls_token]

    @property
    def sep_id(self):
        return self._token_to_id[self.sep_token]

    @property
    def pad_id(self):
        return self._token_to_id[self.pad_token]

    @property
    def mask_id(self):
        return self._token_to_id[self.mask_token]

    def token_to_id(self, token):
        """The id of `token`, or `unk_id` if it is not in the vocabulary."""
        return self._token_to_id.get(token, self.unk_id)

    def id_to_token(self, token_id):
        if not 0 <= token_id < len(self.vocabulary):
            raise ValueError(f"Token id {token_id} is outside the vocabulary of size {len(self.vocabulary)}.")
        return self.vocabulary[token_id]

    def call(self, inputs):
        return self.tokenize(inputs)

    def tokenize(self, inputs):
        """Strings -> int32 WordPiece ids, ragged `[batch, (pieces)]`."""
        ids, _, _ = self.tokenize_with_offsets(inputs)
        return ids

    def tokenize_with_offsets(self, inputs):
        """Strings -> `(ids, starts, ends)`, each ragged `[batch, (pieces)]`.

        `starts`/`ends` (int64) are byte offsets of each piece in the input
        string. A piece that covers only part of a character that expands
        under normalisation (e.g. one jamo of a Hangul syllable) gets the
        whole character's bytes.
        """
        text, scalar = self._check_inputs(inputs)
        ids, starts, ends = self._word_piece_graph.tokenize_with_offsets(text)
        if text.shape[0] is not None:  # the traced function takes any batch: keep a static one
            for pieces in (ids, starts, ends):
                pieces.row_splits.set_shape([text.shape[0] + 1])
        if scalar:
            return ids[0], starts[0], ends[0]
        return ids, starts, ends

    def words_from_pieces(self, ids, values=None):
        """Groups pieces into words: ragged `[batch, (pieces)]` ids ->
        `[batch, (words), (pieces)]`, for whole-word masking and token
        classification. `values` (e.g. offsets) aligned with `ids` are grouped
        the same way instead of the ids when given."""
        values = ids if values is None else values
        starts_word = tf.logical_not(tf.gather(self._word_piece_graph.is_suffix, ids.flat_values))
        word_starts = tf.where(starts_word)[:, 0]
        words = tf.RaggedTensor.from_row_starts(values.flat_values, word_starts, validate=False)
        words_per_row = tf.math.unsorted_segment_sum(tf.cast(starts_word, tf.int64), ids.value_rowids(), ids.nrows())
        return tf.RaggedTensor.from_row_lengths(words, words_per_row, validate=False)

    def detokenize(self, ids):
        """Ids ragged `[batch, (pieces)]` -> strings `[batch]`: pieces joined,
        `##` suffixes glued to their word. Lower-casing and accents are not
        undone."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids))
        tokens = tf.gather(self._word_piece_graph.vocabulary, ids.flat_values)
        is_suffix = tf.gather(self._word_piece_graph.is_suffix, ids.flat_values)
        tokens = tf.where(is_suffix, tf.strings.regex_replace(tokens, "^##", ""), tf.strings.join([" ", tokens]))
        text = tf.strings.reduce_join(ids.with_flat_values(tokens), axis=-1)
        return tf.strings.regex_replace(text, "^ ", "")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary": self.vocabulary,
                "lower_case": self.lower_case,
                "max_chars_per_word": self.max_chars_per_word,
                "max_input_bytes": self.max_input_bytes,
                "unk_token": self.unk_token,
                "cls_token": self.cls_token,
                "sep_token": self.sep_token,
                "pad_token": self.pad_token,
                "mask_token": self.mask_token,
            }
        )
        return config

    def _check_inputs(self, inputs):
        if isinstance(inputs, tf.RaggedTensor):
            raise TypeError("BertTokenizer expects a dense tf.string tensor, got a RaggedTensor.")
        if isinstance(inputs, (str, bytes)) or (
            isinstance(inputs, (list, tuple)) and all(isinstance(x, (str, bytes)) for x in inputs)
        ):
            inputs = tf.constant(inputs, tf.string)
        inputs = tf.convert_to_tensor(inputs)
        if inputs.dtype != tf.string:
            raise TypeError(f"BertTokenizer expects tf.string inputs (raw UTF-8 text), got dtype {inputs.dtype.name}.")
        shape = inputs.shape
        if shape.rank == 0:
            return inputs[tf.newaxis], True
        if shape.rank == 1:
            return inputs, False
        if shape.rank == 2 and shape[1] == 1:
            return inputs[:, 0], False
        raise ValueError(f"BertTokenizer expects strings of shape [batch], [batch, 1] or [], got shape {shape}.")


def _word_piece_graph(vocabulary, lower_case, max_chars_per_word, max_input_bytes, unk_token):
    """The process's `_WordPieceGraph` for these settings; a new one when not made eagerly
    (its constants would belong to that graph)."""
    with tf.init_scope():
        if tf.executing_eagerly():
            return _shared_word_piece_graph(
                tuple(vocabulary), lower_case, max_chars_per_word, max_input_bytes, unk_token
            )
    return _WordPieceGraph(vocabulary, lower_case, max_chars_per_word, max_input_bytes, unk_token)


@functools.lru_cache(maxsize=16)
def _shared_word_piece_graph(vocabulary, lower_case, max_chars_per_word, max_input_bytes, unk_token):
    return _WordPieceGraph(vocabulary, lower_case, max_chars_per_word, max_input_bytes, unk_token)


class _WordPieceGraph:
    """Strings -> pieces as one `tf.function`, traced once per process for a vocabulary and
    settings. Its graph has about 700 nodes and took 0.23 CPU-s to trace, and every
    `tf.data` pipeline, predict function and export of every model that holds a tokenizer
    traced it again; in those it is now one call of this function."""

    def __init__(self, vocabulary, lower_case, max_chars_per_word, max_input_bytes, unk_token):
        vocabulary = list(vocabulary)
        self.lower_case = lower_case
        self.max_chars_per_word = max_chars_per_word
        self.max_input_bytes = max_input_bytes
        self.unk_id = len(vocabulary) - 1 - vocabulary[::-1].index(unk_token)  # the last duplicate, as the original
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
        return _ragged_cond(
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


def _ragged_cond(predicate, true_fn, false_fn):
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
