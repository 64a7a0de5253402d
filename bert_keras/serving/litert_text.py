"""The original BERT tokenizer in ops LiteRT runs: exact ids on any text, inside the `.tflite`.

LiteRT has builtin ops on numbers and a few tf.text kernels on strings
(`tensorflow_text.tflite_registrar`), but no Unicode normalisation that follows the
original's rules (tf.text's `FastBertNormalize` follows ICU: ligatures, full-width forms,
final sigma and control characters come out otherwise). So the text is taken apart into
numbers and the original's rules are applied as a table:

1. `ByteSplit` gives each row's bytes; builtin arithmetic decodes UTF-8 as the original
   does (`errors="ignore"`: bytes of ill-formed sequences are dropped).
2. Every code point is looked up in a table computed here in Python from the original's
   own rules (`unicodedata`): removed (NUL, U+FFFD, `C*` but tab, newline, carriage return),
   whitespace, a CJK ideograph (a word of its own), and what it becomes: itself (cased), or
   `NFD(c.lower())` without `Mn` marks (uncased), each resulting character marked if it is
   punctuation (a word of its own). Python's only context-dependent lower case, the final
   sigma, is decided in the graph from the table's `cased`/`case-ignorable` marks, which
   are read off `str.lower` itself.
3. Builtin arithmetic splits the result into words and encodes them as UTF-8 bytes, which
   `FastWordpieceDetokenize` over a vocabulary of the 255 bytes joins into word strings;
   `FastWordpieceTokenize` (no pre-tokenization) gives each word's pieces, and words of more
   than `max_chars_per_word` characters become `unk_token`, as in the original.

One thing per-character rules cannot do: NFD reorders combining marks by their combining
class, which changes the uncased text only where a mark the accent removal keeps (not `Mn`)
follows another such mark of a higher class in one run of marks, e.g. two of the musical
symbols' combining stems. Such rows are refused: `exact` is false. Every code point alone
and in context equals the original (tests/serving/test_litert_text.py,
bench/bench_tokenizer.py litert --code-points).
"""

import functools
import unicodedata

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.text.fast_wordpiece import fast_wordpiece_tokenizer
from bert_keras.text.packer import _waterfall_lengths, balanced_lengths
from bert_keras.text.words import ASCII_PUNCTUATION_RANGES, CJK_RANGES

CODE_POINTS = 0x110000
BLOCK = 256
SIGMA, FINAL_SIGMA = 0x3A3, 0x3C2
# Columns of the behaviour table: a code point's outputs are OUTPUT.. + RELATIVE * code point.
REMOVED, SPACE, CJK, CASED, IGNORABLE, SIGMA_MARK, STARTS_MARK, ENDS_MARK, FIRST_KEPT_MARK, LAST_KEPT_MARK = range(10)
COUNT, RELATIVE = 11, 12
OUTPUTS = 4  # at most this many characters come out of one (uncased: a Hangul syllable's 3 jamo)
OUTPUT = 13
PUNCTUATION = OUTPUT + OUTPUTS
COLUMNS = PUNCTUATION + OUTPUTS
_BYTE_LEADS = (0, 0, 0xC0, 0xE0, 0xF0)


def is_punctuation(char):
    code = ord(char)
    return any(low <= code <= high for low, high in ASCII_PUNCTUATION_RANGES) or unicodedata.category(char)[0] == "P"


def is_removed(char):
    return char in "\x00\ufffd" or (char not in "\t\n\r" and unicodedata.category(char)[0] == "C")


def _lowers_to_final_sigma(text):
    return text.lower().endswith(chr(FINAL_SIGMA))


def behaviour(code, lower_case):
    """The table row of one code point (see the column names)."""
    row = [0] * COLUMNS
    char = chr(code)
    if is_removed(char):
        row[REMOVED] = 1
        return tuple(row)
    if char.isspace():
        row[SPACE] = 1
        return tuple(row)
    row[CJK] = int(any(low <= code <= high for low, high in CJK_RANGES))
    outputs = char
    if lower_case:
        decomposed = unicodedata.normalize("NFD", char.lower())
        outputs = "".join(c for c in decomposed if unicodedata.category(c) != "Mn")
        # Python's final-sigma rule, read off str.lower: "xΣ" ends in ς if x is cased and not
        # case-ignorable; "AxΣ" does if x is case-ignorable (skipped) too.
        row[CASED] = int(_lowers_to_final_sigma(char + chr(SIGMA)))
        row[IGNORABLE] = int(not row[CASED] and _lowers_to_final_sigma("A" + char + chr(SIGMA)))
        row[SIGMA_MARK] = int(code == SIGMA)
        row[STARTS_MARK] = int(unicodedata.combining(decomposed[0]) > 0)
        row[ENDS_MARK] = int(unicodedata.combining(decomposed[-1]) > 0)
        # The combining classes of the first and last marks the accent removal keeps (not `Mn`).
        kept = [unicodedata.combining(c) for c in decomposed if unicodedata.category(c) != "Mn"]
        kept = [combining for combining in kept if combining] or [0]
        row[FIRST_KEPT_MARK], row[LAST_KEPT_MARK] = kept[0], kept[-1]
    if len(outputs) > OUTPUTS or any(c.isspace() or is_removed(c) for c in outputs):
        raise ValueError(f"U+{code:04X} becomes {outputs!r}, which the LiteRT tokenizer cannot write")
    row[COUNT] = len(outputs)
    row[RELATIVE] = int(len(outputs) == 1)
    for index, output in enumerate(outputs):
        row[OUTPUT + index] = ord(output) - code if len(outputs) == 1 else ord(output)
        row[PUNCTUATION + index] = int(is_punctuation(output))
    return tuple(row)


@functools.cache
def character_table(lower_case):
    """(block index [CODE_POINTS // BLOCK], blocks [n * BLOCK] of behaviour ids, behaviours
    [m, COLUMNS]): the behaviour of code point c is behaviours[blocks[block_index[c // BLOCK]
    * BLOCK + c % BLOCK]]. Identical blocks are stored once."""
    behaviours, blocks, block_index = {}, {}, []
    removed = behaviour(0, lower_case)
    for start in range(0, CODE_POINTS, BLOCK):
        block = tuple(
            behaviours.setdefault(removed if 0xD800 <= code <= 0xDFFF else behaviour(code, lower_case), len(behaviours))
            for code in range(start, start + BLOCK)
        )
        block_index.append(blocks.setdefault(block, len(blocks)))
    return (
        np.array(block_index, np.int32),
        np.array(list(blocks), np.int32).reshape(-1),
        np.array(list(behaviours), np.int32),
    )


def row_ids(row_splits, size):
    """The row of each of `size` values of a ragged tensor with `row_splits` (int32)."""
    starts = tf.math.unsorted_segment_sum(tf.ones_like(row_splits[1:-1]), row_splits[1:-1], size + 1)
    return tf.cumsum(starts[:size])


def decode_utf8(values, rows):
    """Bytes (int32) of rows -> (code points, rows) of the well-formed sequences, which is
    what Python's `decode("utf-8", "ignore")` keeps."""
    size = tf.size(values)
    index = tf.range(size)

    def following(offset):
        at = tf.minimum(index + offset, size - 1)
        inside = tf.logical_and(index + offset < size, tf.equal(tf.gather(rows, at), rows))
        return tf.where(inside, tf.gather(values, at), -1)

    lead, second, third, fourth = values, following(1), following(2), following(3)

    def within(value, low, high):
        return tf.logical_and(value >= low, value <= high)

    low = tf.where(tf.equal(lead, 0xE0), 0xA0, tf.where(tf.equal(lead, 0xF0), 0x90, 0x80))
    high = tf.where(tf.equal(lead, 0xED), 0x9F, tf.where(tf.equal(lead, 0xF4), 0x8F, 0xBF))
    second_ok = within(second, low, high)
    one = lead < 0x80
    two = within(lead, 0xC2, 0xDF) & within(second, 0x80, 0xBF)
    three = within(lead, 0xE0, 0xEF) & second_ok & within(third, 0x80, 0xBF)
    four = within(lead, 0xF0, 0xF4) & second_ok & within(third, 0x80, 0xBF) & within(fourth, 0x80, 0xBF)
    two_bytes = (lead - 0xC0) * 64 + second - 0x80
    three_bytes = (lead - 0xE0) * 4096 + (second - 0x80) * 64 + third - 0x80
    four_bytes = (lead - 0xF0) * 262144 + (second - 0x80) * 4096 + (third - 0x80) * 64 + fourth - 0x80
    code = tf.where(one, lead, tf.where(two, two_bytes, tf.where(three, three_bytes, four_bytes)))
    kept = tf.where(one | two | three | four)[:, 0]
    return tf.gather(code, kept), tf.gather(rows, kept)


def neighbours(marked, groups):
    """For each position, the index of the nearest `marked` one before it and after it in
    the same group (`groups` sorted), or `size` (a sentinel) where there is none."""
    size = tf.size(groups)
    counted = tf.cast(marked, tf.int32)
    positions = tf.concat([tf.cast(tf.where(marked)[:, 0], tf.int32), tf.reshape(size, [1])], 0)
    before = tf.cumsum(counted, exclusive=True)
    previous = tf.where(before > 0, tf.gather(positions, tf.maximum(before - 1, 0)), size)
    after = tf.gather(positions, before + counted)
    with_sentinel = tf.concat([groups, [-1]], 0)

    def in_group(index):
        return tf.where(tf.equal(tf.gather(with_sentinel, index), groups), index, size)

    return in_group(previous), in_group(after)


def _previous(values, fill):
    """`values` shifted one place on, `fill` first (empty stays empty)."""
    return tf.concat([tf.reshape(fill, [1]), values], 0)[: tf.size(values)]


class LiteRTTokenizer:
    """Strings `[batch]` -> (WordPiece ids, their rows, `[batch]` whether each row is exact),
    the original tokenizer's, in builtin ops and tf.text's LiteRT kernels."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.lower_case = tokenizer.lower_case
        block_index, blocks, behaviours = character_table(tokenizer.lower_case)
        self.block_index = tf.constant(block_index)
        self.blocks = tf.constant(blocks)
        self.behaviours = tf.constant(behaviours)
        self.removed = tf.constant(behaviours[:, REMOVED])
        self.bytes = tf_text.ByteSplitter()
        # A byte vocabulary: ids 1..255 are bytes that start a word, 257..511 bytes that continue it.
        byte_tokens = [bytes([byte]) for byte in range(1, 256)]
        self.words = fast_wordpiece_tokenizer(
            [b"[NUL]", *byte_tokens, b"##[NUL]", *[b"##" + token for token in byte_tokens]],
            100,
            "[NUL]",
            tf.int64,
            no_pretokenization=True,
            detokenize=True,
        )
        self.wordpiece = fast_wordpiece_tokenizer(
            tokenizer.vocabulary,
            4 * tokenizer.max_chars_per_word,  # longer words are found by characters
            tokenizer.unk_token,
            tf.int32,
            no_pretokenization=True,
        )

    def __call__(self, text):
        batch = tf.size(text)
        split = self.bytes.split(text)
        splits = tf.cast(split.row_splits, tf.int32)
        values = tf.cast(split.flat_values, tf.int32)
        codes, rows = decode_utf8(values, row_ids(splits, tf.size(values)))
        behaviours = self.lookup(codes)
        kept = tf.where(tf.equal(tf.gather(self.removed, behaviours), 0))[:, 0]
        codes, rows = tf.gather(codes, kept), tf.gather(rows, kept)
        table = tf.gather(self.behaviours, tf.gather(behaviours, kept))
        outputs = table[:, OUTPUT:PUNCTUATION] + table[:, RELATIVE : RELATIVE + 1] * codes[:, tf.newaxis]
        exact = tf.fill(tf.reshape(batch, [1]), True)
        if self.lower_case:  # cased: no lower case, no NFD
            final = tf.logical_and(tf.equal(table[:, SIGMA_MARK], 1), self.final_sigma(table, rows))
            outputs = tf.concat([tf.where(final, FINAL_SIGMA, outputs[:, 0])[:, tf.newaxis], outputs[:, 1:]], 1)
            exact = tf.less_equal(tf.math.unsorted_segment_max(self.reordered(table, rows), rows, batch), 0)
        ids, piece_rows = self.pieces(self.word_strings(table, rows, outputs))
        return ids, piece_rows, exact

    def lookup(self, codes):
        block = tf.gather(self.block_index, codes // BLOCK)
        return tf.gather(self.blocks, block * BLOCK + codes % BLOCK)

    def final_sigma(self, table, rows):
        """Whether each character is in Python's Final_Sigma context within its word:
        after a cased character and not before one, case-ignorable ones skipped."""
        previous, after = neighbours(tf.equal(table[:, IGNORABLE], 0), rows)
        cased = tf.concat([table[:, CASED], [0]], 0)
        before_cased = tf.equal(tf.gather(cased, previous), 1)
        return tf.logical_and(before_cased, tf.not_equal(tf.gather(cased, after), 1))

    def reordered(self, table, rows):
        """1 where NFD's canonical reordering changes the uncased text, else 0: where a kept
        mark (not `Mn`) follows one of a higher combining class in the same run of marks."""
        same_row = tf.equal(_previous(rows, -1), rows)
        joined = tf.logical_and(tf.equal(table[:, STARTS_MARK] * _previous(table[:, ENDS_MARK], 0), 1), same_row)
        run = tf.cumsum(1 - tf.cast(joined, tf.int32))
        marked = table[:, FIRST_KEPT_MARK] > 0
        earlier, _ = neighbours(marked, run)
        last_class = tf.gather(tf.concat([table[:, LAST_KEPT_MARK], [0]], 0), earlier)
        return tf.cast(tf.logical_and(marked, last_class > table[:, FIRST_KEPT_MARK]), tf.int32)

    def word_strings(self, table, rows, outputs):
        """The normalised words as strings, and each word's row and length in characters."""
        counts = table[:, COUNT]
        chosen = tf.where(tf.range(OUTPUTS)[tf.newaxis, :] < counts[:, tf.newaxis])
        source = tf.cast(chosen[:, 0], tf.int32)
        flat = source * OUTPUTS + tf.cast(chosen[:, 1], tf.int32)
        codes = tf.gather(tf.reshape(outputs, [-1]), flat)
        punctuation = tf.equal(tf.gather(tf.reshape(table[:, PUNCTUATION:], [-1]), flat), 1)
        spaces = tf.cumsum(table[:, SPACE])
        previous = _previous(source, -1)
        new_source = tf.not_equal(source, previous)
        previous = tf.maximum(previous, 0)
        cjk = tf.gather(table[:, CJK], source) + tf.gather(table[:, CJK], previous) > 0
        starts = tf.reduce_any(
            tf.stack(
                [
                    tf.equal(tf.range(tf.size(source)), 0),
                    punctuation,
                    _previous(punctuation, False),
                    tf.not_equal(tf.gather(rows, source), tf.gather(rows, previous)),
                    tf.logical_and(new_source, cjk),
                    tf.not_equal(tf.gather(spaces, source), tf.gather(spaces, previous)),
                ]
            ),
            axis=0,
        )
        word = tf.cumsum(tf.cast(starts, tf.int32)) - 1
        count = tf.reduce_sum(tf.cast(starts, tf.int32))
        word_rows = tf.math.unsorted_segment_max(tf.gather(rows, source), word, count)
        lengths = tf.math.unsorted_segment_sum(tf.ones_like(word), word, count)
        return self.encode(codes, starts, word, count), word_rows, lengths

    def encode(self, codes, starts, word, count):
        """Characters -> their words as strings, via UTF-8 bytes and the byte vocabulary."""
        lengths = 1 + tf.cast(codes >= 0x80, tf.int32) + tf.cast(codes >= 0x800, tf.int32)
        lengths += tf.cast(codes >= 0x10000, tf.int32)
        position = tf.range(4)[tf.newaxis, :]
        shift = tf.maximum(lengths[:, tf.newaxis] - 1 - position, 0)
        part = codes[:, tf.newaxis] // tf.gather(tf.constant([1, 64, 4096, 262144]), shift)
        lead = tf.gather(tf.constant(_BYTE_LEADS), lengths)[:, tf.newaxis] + part
        byte = tf.where(tf.equal(position, 0), lead, 0x80 + part % 64)
        byte += 256 * tf.cast(tf.logical_not(tf.logical_and(tf.equal(position, 0), starts[:, tf.newaxis])), tf.int32)
        chosen = tf.where(position < lengths[:, tf.newaxis])
        ids = tf.gather_nd(byte, chosen)
        word_bytes = tf.math.unsorted_segment_sum(lengths, word, count)
        splits = tf.concat([[0], tf.cumsum(tf.cast(word_bytes, tf.int64))], 0)
        return self.words.detokenize(tf.RaggedTensor.from_row_splits(ids, splits, validate=False))

    def pieces(self, words):
        """Words -> (WordPiece ids, their rows); words longer than `max_chars_per_word`
        characters are one `unk_token`."""
        strings, word_rows, lengths = words
        tokenized = self.wordpiece.tokenize(strings)
        splits = tf.cast(tokenized.row_splits, tf.int32)
        word = row_ids(splits, tf.size(tokenized.flat_values))
        long_word = tf.gather(lengths, word) > self.tokenizer.max_chars_per_word
        first = tf.equal(tf.range(tf.size(word)), tf.gather(splits, word))
        kept = tf.where(tf.logical_or(first, tf.logical_not(long_word)))[:, 0]
        ids = tf.where(long_word, self.tokenizer.unk_id, tokenized.flat_values)
        return tf.gather(ids, kept), tf.gather(tf.gather(word_rows, word), kept)


class LiteRTPacker:
    """Texts (one `[batch]` string tensor a segment) -> the packed ids `BertPreprocessor`
    makes, and whether each row was tokenized exactly, in ops LiteRT runs.

    The packed length is the longest row's rounded up to `pad_to_multiple_of`, at most
    `max_seq_length` (a fixed `seq_length` is both)."""

    def __init__(self, tokenizer, max_seq_length, pad_to_multiple_of=1, truncation="longest_first"):
        self.tokenizer = LiteRTTokenizer(tokenizer)
        self.special = tokenizer
        self.max_seq_length = int(max_seq_length)
        self.pad_to_multiple_of = int(pad_to_multiple_of)
        self.truncation = truncation

    def __call__(self, texts):
        batch = tf.size(texts[0])
        budget = self.max_seq_length - 1 - len(texts)
        pieces, lengths, exact = [], [], tf.fill(tf.reshape(batch, [1]), True)
        for text in texts:
            ids, rows, exact_rows = self.tokenizer(text)
            row_lengths = tf.math.unsorted_segment_sum(tf.ones_like(rows), rows, batch)
            ragged = tf.RaggedTensor.from_row_lengths(ids, row_lengths, validate=False)
            pieces.append(tf.reshape(ragged.to_tensor(default_value=self.special.pad_id, shape=[None, budget]), [-1]))
            lengths.append(row_lengths)
            exact = tf.logical_and(exact, exact_rows)
        lengths = tf.stack(lengths, axis=1)
        truncate = _waterfall_lengths if self.truncation == "waterfall" else balanced_lengths
        kept = truncate(lengths, tf.constant(budget))
        return self.layout(pieces, kept, budget), exact

    def layout(self, pieces, kept, budget):
        """[CLS] a [SEP] b [SEP] ... from each segment's first `kept` pieces, padded."""
        segments = len(pieces)
        starts = 1 + tf.cumsum(kept + 1, axis=1, exclusive=True)
        separators = starts + kept
        totals = separators[:, -1:] + 1
        multiple = self.pad_to_multiple_of
        longest = tf.reduce_max(tf.concat([totals[:, 0], [segments + 1]], 0))
        width = tf.minimum((longest + multiple - 1) // multiple * multiple, self.max_seq_length)
        position = tf.range(width)[tf.newaxis, :]
        row = tf.range(tf.shape(kept)[0])[:, tf.newaxis] * budget
        word_ids = tf.where(tf.equal(position, 0), self.special.cls_id, self.special.pad_id)
        word_ids += tf.zeros_like(row)
        type_ids = tf.zeros_like(word_ids)
        for index, flat in enumerate(pieces):
            start, separator = starts[:, index : index + 1], separators[:, index : index + 1]
            inside = tf.logical_and(position >= start, position < separator)
            piece = tf.gather(flat, row + tf.clip_by_value(position - start, 0, budget - 1))
            word_ids = tf.where(inside, piece, word_ids)
            word_ids = tf.where(tf.equal(position, separator), self.special.sep_id, word_ids)
            if index < segments - 1:
                type_ids += tf.cast(position > separator, tf.int32)
        input_mask = tf.cast(position < totals, tf.int32)
        return {"input_word_ids": word_ids, "input_mask": input_mask, "input_type_ids": type_ids * input_mask}
