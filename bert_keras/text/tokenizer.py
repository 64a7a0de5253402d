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

import os

import keras
import tensorflow as tf

from bert_keras.checkpoint.text_files import vocab_tokens
from bert_keras.compat import accept_raw_inputs
from bert_keras.files import decode_text
from bert_keras.text.word_piece_graph import word_piece_graph

# Ops outside core TensorFlow that a graph using this tokenizer contains.
NON_CORE_OPS = ("FastWordpieceTokenizeWithOffsets", "NormalizeUTF8")


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

        self._word_piece_graph = word_piece_graph(
            self.vocabulary, self.lower_case, self.max_chars_per_word, self.max_input_bytes, self.unk_token, self.unk_id
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
