"""The words WordPiece sees, in plain Python: what `bert-keras vocab` counts.

The original BERT `BasicTokenizer`'s rules, in the order `BertTokenizer` applies them in
the graph: invalid UTF-8 read as U+FFFD; U+FFFD and every `C*` character but `\\t \\n \\r`
removed; then, uncased, Python's `str.lower` (full Unicode, final sigma), NFD and removal
of `Mn` marks; then words split at whitespace (`\\t \\n \\r`, `Z*`) and around each
punctuation character (ASCII non-alphanumerics, `P*`) and CJK ideograph. No TensorFlow:
counting starts at once, and a `--workers` process starts in a fraction of a second.

Character classes come from `unicodedata` (Unicode 14 on Python 3.11) and are worked out
only for the characters a text holds, so the regular expressions stay small and fast.
Checked against the graph's ops on every BMP code point and every 7th of planes 1-2
(tests/text/test_vocab.py); they differ only where the Unicode versions do: code points
Python's Unicode leaves unassigned but RE2's newer one assigns are removed here, kept there,
and the few letters whose lower case is newer than TensorFlow's ICU table (in the BMP:
U+2C2F, U+A7C0, U+A7D0, U+A7D6, U+A7D8) are lower-cased here, not there. In both cases
this is what the original BERT tokenizer does on this Python.
"""

import functools
import re
import unicodedata

# The original's `_is_chinese_char` ranges: each such character is a word.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
# The original's `_is_punctuation` ASCII ranges (symbols such as $ + < = > ^ ` | ~ included).
ASCII_PUNCTUATION_RANGES = ((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E))


@functools.cache
def character_kind(char):
    """ "space", "removed", "punctuation" (a word of its own), "mark" (`Mn`) or "letter"."""
    category = unicodedata.category(char)
    code = ord(char)
    if char in "\t\n\r" or category[0] == "Z":
        return "space"
    if category[0] == "C" or code == 0xFFFD:
        return "removed"
    if category[0] == "P" or any(low <= code <= high for low, high in CJK_RANGES + ASCII_PUNCTUATION_RANGES):
        return "punctuation"
    return "mark" if category == "Mn" else "letter"


def _class(chars, kind):
    """A regex character class body of those of `chars` of `kind` ("" if none)."""
    return "".join(sorted(re.escape(char) for char in chars if character_kind(char) == kind))


def _remove(text, kind):
    removed = _class(set(text), kind)
    return re.sub(f"[{removed}]+", "", text) if removed else text


def split_words(text, lower_case=True):
    """The original BasicTokenizer's words of `text` (a str; lines are independent):
    normalised and split as `BertTokenizer` does before WordPiece."""
    text = _remove(text, "removed")
    if lower_case:
        text = text.lower()
        if not text.isascii():
            text = _remove(unicodedata.normalize("NFD", text), "mark")
    chars = set(text) | {"\n"}
    punctuation, space = _class(chars, "punctuation"), _class(chars, "space")
    return re.findall(f"[^{space}{punctuation}]+|[{punctuation}]" if punctuation else f"[^{space}]+", text)
