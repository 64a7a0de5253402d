"""Documents for pre-training: text files -> documents of sentences -> WordPiece ids.

Two document formats are read:
- "lines": one sentence per line, a blank line between documents (the original format,
  e.g. sample_text.txt).
- "prose": paragraphs separated by blank lines, lines wrapped anywhere (Project
  Gutenberg). Paragraphs are split into sentences by `split_sentences`; a heading
  paragraph (CHAPTER/BOOK/VOLUME/PART ..., or a Roman numeral "IV. Title") starts a new
  document and is dropped, as are bracketed title lines such as "[Emma by Jane Austen]".
"""

import hashlib
import re
from pathlib import Path

import tensorflow as tf

# The tokenizer's constructor arguments besides its vocabulary.
TOKENIZER_SETTINGS = (
    "lower_case",
    "max_chars_per_word",
    "max_input_bytes",
    "unk_token",
    "cls_token",
    "sep_token",
    "pad_token",
    "mask_token",
)

# The text rules, shared with the tf.data reader of `dynamic_masking` (which writes them as RE2).
FORMATS = ("auto", "lines", "prose")
HEADING_WORDS = ("CHAPTER", "Chapter", "BOOK", "Book", "VOLUME", "Volume", "PART", "Part")
HEADING_ENDS = (".", "!", "?", '"')  # a one-line paragraph ending so is a sentence, not a heading
LINE_ENDS = (".", "!", "?", '"', "'", "\u201d")  # `detect_text_format`: lines ending so are sentences
ABBREVIATIONS = (
    "mr",
    "mrs",
    "ms",
    "dr",
    "st",
    "mt",
    "jr",
    "sr",
    "prof",
    "rev",
    "gen",
    "col",
    "capt",
    "lt",
    "sgt",
    "hon",
    "esq",
    "vs",
    "etc",
    "no",
    "vol",
    "ch",
    "fig",
    "cf",
    "e.g",
    "i.e",
)
_HEADING = re.compile(rf"^(?:(?:{'|'.join(HEADING_WORDS)})\b|[IVXLC]+\.\s|[IVXLC]+$)")
_TITLE = re.compile(r"^\[.*\]$")
# A sentence ends at . ! or ? (plus closing quotes/brackets) followed by space and a
# capital, digit or opening quote. Abbreviations and initials do not end sentences.
_SENTENCE_END = re.compile(r"""[.!?]+["'\u2019\u201d)\]_]*\s+(?=["'\u2018\u201c(\[_]*[A-Z0-9])""")
_ABBREVIATIONS = frozenset(ABBREVIATIONS)


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
    return parse_documents(Path(path).read_bytes().decode("utf-8", errors="ignore"), format)  # as the original reader


def check_format(format):
    if format not in FORMATS:
        raise ValueError(f"document format must be 'auto', 'lines' or 'prose', got {format!r}")


def parse_documents(text, format="auto"):
    """Text -> list of documents, each a list of sentence strings (see module doc)."""
    check_format(format)
    if format == "auto":
        format = detect_text_format(text)
    if format == "lines":
        documents = [[]]
        for line in text.splitlines():
            line = line.strip()
            if not line:
                documents.append([])
            else:
                documents[-1].append(line)
    else:
        documents = [[]]
        for paragraph in re.split(r"\n\s*\n", text):
            paragraph = paragraph.strip()
            if not paragraph or _TITLE.match(paragraph):
                continue
            if "\n" not in paragraph and is_heading(paragraph):
                documents.append([])
                continue
            documents[-1].extend(split_sentences(paragraph))
    return [document for document in documents if document]


def is_heading(line):
    """A stripped one-line paragraph that starts a new prose document (and is dropped)."""
    return bool(_HEADING.match(line)) and not line.endswith(HEADING_ENDS)


def detect_text_format(text):
    """'prose' when most non-blank lines are wrapped text (no sentence end), else 'lines'."""
    lines = [line.strip() for line in text.splitlines()[:2000] if line.strip()]
    if not lines:
        return "lines"
    ending = sum(line.endswith(LINE_ENDS) for line in lines)
    return "lines" if ending >= 0.5 * len(lines) else "prose"


def tokenizer_fingerprint(tokenizer):
    """Everything that decides a tokenizer's ids: its vocabulary (hashed) and its settings."""
    vocabulary = "\n".join(tokenizer.vocabulary).encode("utf-8")
    config = tokenizer.get_config()
    return {
        "vocab_sha256": hashlib.sha256(vocabulary).hexdigest(),
        "vocab_size": len(tokenizer.vocabulary),
        **{key: config[key] for key in TOKENIZER_SETTINGS},
    }


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
