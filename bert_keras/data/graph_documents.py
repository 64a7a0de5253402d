"""Text files read into documents in the graph: `documents.read_documents` as tf.data ops.

`file_documents` reads "lines", "prose" or "auto" files as `read_documents` does, with the
text rules of `documents` written as RE2; `read_files` reads many files at once.
"""

import re

import tensorflow as tf

from bert_keras.data.documents import ABBREVIATIONS, HEADING_ENDS, HEADING_WORDS, LINE_ENDS
from bert_keras.text.word_piece_graph import ragged_cond

_ABBREVIATIONS = "|".join(re.escape(abbreviation) for abbreviation in ABBREVIATIONS)
# Python's str.splitlines line breaks, and its whitespace (str.split, str.strip, \s), for RE2.
_LINE_BREAK = r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x{85}\x{2028}\x{2029}]"
_OTHER_SPACES = r"\t\n\x0b\x0c\r\x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
_WHITESPACE = f"[ {_OTHER_SPACES}]"
_WHITESPACE_BUT_SPACE = f"[{_OTHER_SPACES}]"
# Markers that real text does not contain (Unicode noncharacters).
_PARAGRAPH_MARK = "\ufdd0"
_SENTENCE_MARK = "\ufdd1"
_CLOSERS = "[\"'\\x{2019}\\x{201d})\\]_]"


def read_files(files, read, readers, seed=None):
    """`read(path)` for every file, by `readers` readers at once, each in its own thread
    with its own copy of `read` (TensorFlow's regex kernels serialize the threads that
    share one). Reader k reads files k, k + readers, ...: in that order, or with `seed`
    in a new order every epoch; the readers take turns, one file each."""
    readers = min(readers, len(files))

    def reader(shard):
        shard = tf.data.Dataset.from_tensor_slices(shard)
        if seed is not None:
            shard = shard.shuffle(len(shard), seed=seed, reshuffle_each_iteration=True)
        return shard.map(tf.autograph.experimental.do_not_convert(read)).prefetch(1)

    return tf.data.Dataset.choose_from_datasets(
        [reader(files[k::readers]) for k in range(readers)],
        tf.data.Dataset.range(len(files)).map(lambda index: index % readers),
    )


def file_documents(raw, format="auto"):
    """A file's bytes -> ragged `[documents, (sentences)]` strings, as `read_documents`."""
    # Invalid UTF-8 bytes are dropped, as the original reader does (ASCII needs no check).
    text = tf.cond(
        tf.strings.regex_full_match(raw, "(?s)[\\x00-\\x7f]*"),
        lambda: raw,
        lambda: tf.strings.unicode_transcode(raw, "UTF-8", "UTF-8", errors="ignore"),
    )
    if format == "lines":
        return _line_documents(text)
    if format == "prose":
        return _prose_documents(text)
    return ragged_cond(_is_prose(text), lambda: (_prose_documents(text),), lambda: (_line_documents(text),))[0]


def tokenized_documents(raw, tokenizer, format="auto"):
    """A file's bytes -> ragged `[documents, (sentences), (tokens)]` ids. As the original,
    sentences with no pieces are dropped, then documents left empty."""
    documents = file_documents(raw, format)
    pieces = tokenizer.tokenize(documents.flat_values)
    nonempty = documents.with_flat_values(pieces.row_lengths() > 0)
    tokenized = tf.ragged.boolean_mask(documents.with_flat_values(pieces), nonempty)
    return tf.ragged.boolean_mask(tokenized, tokenized.row_lengths() > 0)


def _lines(text, limit=None):
    """str.splitlines (plus a trailing empty line); with `limit`, the first `limit` lines,
    without scanning the rest of the text."""
    if limit is not None:  # the first `limit` "\n"-separated pieces hold at least `limit` lines
        text = tf.strings.reduce_join(tf.strings.split(text, "\n", maxsplit=limit)[:limit], separator="\n")
    return tf.strings.split(tf.strings.regex_replace(text, _LINE_BREAK, "\n"), "\n")[:limit]


def _one_of(characters):
    """An RE2 character class of `characters`."""
    return "[" + "".join(re.escape(character) for character in characters) + "]"


def _strip(strings):
    return tf.strings.regex_replace(strings, f"^{_WHITESPACE}+|{_WHITESPACE}+$", "")


def _is_prose(text):
    """`documents.detect_text_format`: most of the first 2000 non-blank lines end without a sentence end."""
    lines = _strip(_lines(text, 2000))
    lines = tf.boolean_mask(lines, tf.strings.length(lines) > 0)
    ending = tf.strings.regex_full_match(lines, f"(?s).*{_one_of(LINE_ENDS)}")
    count = tf.size(lines)
    return tf.logical_and(count > 0, 2 * tf.reduce_sum(tf.cast(ending, tf.int32)) < count)


def _line_documents(text):
    """One sentence per line, a blank line between documents."""
    lines = _strip(_lines(text))
    blank = tf.equal(tf.strings.length(lines), 0)
    documents = tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(lines, ~blank),
        tf.boolean_mask(tf.cumsum(tf.cast(blank, tf.int64)), ~blank),
        nrows=tf.reduce_sum(tf.cast(blank, tf.int64)) + 1,
        validate=False,
    )
    return tf.ragged.boolean_mask(documents, documents.row_lengths() > 0)


def _prose_documents(text):
    """Paragraphs split into sentences; a heading starts a new document and is dropped."""
    marked = tf.strings.regex_replace(text, f"\n(?:{_WHITESPACE})*\n", _PARAGRAPH_MARK)
    paragraphs = _strip(tf.strings.split(marked, _PARAGRAPH_MARK))
    single_line = ~tf.strings.regex_full_match(paragraphs, "(?s).*\n.*")
    heading = (
        single_line
        & tf.strings.regex_full_match(
            paragraphs,
            rf"(?:(?:{'|'.join(HEADING_WORDS)})\b|[IVXLC]+\.{_WHITESPACE}|[IVXLC]+$).*",
        )
        & ~tf.strings.regex_full_match(paragraphs, f"(?s).*{_one_of(HEADING_ENDS)}")
    )
    title = tf.strings.regex_full_match(paragraphs, r"\[[^\n]*\]")
    keep = ~heading & ~title & (tf.strings.length(paragraphs) > 0)
    document_index = tf.boolean_mask(tf.cumsum(tf.cast(heading, tf.int64)), keep)
    sentences = split_sentences(tf.boolean_mask(paragraphs, keep))  # [paragraphs, (sentences)]
    documents = tf.RaggedTensor.from_value_rowids(
        sentences.flat_values,
        tf.repeat(document_index, sentences.row_lengths()),
        nrows=tf.reduce_sum(tf.cast(heading, tf.int64)) + 1,
        validate=False,
    )
    return tf.ragged.boolean_mask(documents, documents.row_lengths() > 0)


def split_sentences(paragraphs):
    """`documents.split_sentences` on a batch: strings -> ragged `[batch, (sentences)]`.

    RE2 has no look-around, so every candidate end is marked, then the pieces whose
    end is an abbreviation or an initial ("Mr.", "A.") are joined to the next one.
    """
    # Runs of whitespace -> one space (only where that changes something: much faster).
    text = tf.strings.regex_replace(paragraphs, f"{_WHITESPACE}{{2,}}|{_WHITESPACE_BUT_SPACE}", " ")
    text = _strip(text)
    text = tf.strings.regex_replace(
        text, f"([.!?]+{_CLOSERS}*) ([\"'\\x{{2018}}\\x{{201c}}(\\[_]*[A-Z0-9])", f"\\1{_SENTENCE_MARK}\\2"
    )
    pieces = tf.strings.split(text, _SENTENCE_MARK)
    flat = pieces.flat_values
    # The word before a candidate end that starts with "." (an end starting with ! or ?
    # leaves the word empty or ending in ! or ?, never an abbreviation or a letter).
    word = tf.strings.regex_replace(flat, f"(?s)^(?:.* )?(?:(\\S*?)\\.[.!?]*|\\S*?[!?][.!?]*){_CLOSERS}*$", "\\1")
    not_an_end = tf.strings.regex_full_match(word, f"(?i){_ABBREVIATIONS}|\\p{{L}}")
    index = tf.range(tf.size(flat, out_type=tf.int64))
    last = tf.equal(index, tf.gather(pieces.row_limits(), pieces.value_rowids()) - 1)
    ends = last | ~not_an_end
    # Sentence of each piece: the number of ends before it.
    sentence = tf.cumsum(tf.cast(ends, tf.int64), exclusive=True)
    joined = tf.strings.reduce_join(
        tf.RaggedTensor.from_value_rowids(flat, sentence, validate=False), axis=1, separator=" "
    )
    sentences_per_row = tf.math.unsorted_segment_sum(tf.cast(ends, tf.int64), pieces.value_rowids(), pieces.nrows())
    result = tf.RaggedTensor.from_row_lengths(joined, sentences_per_row, validate=False)
    return tf.ragged.boolean_mask(result, tf.strings.length(result) > 0)
