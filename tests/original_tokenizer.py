"""A line-by-line port of the original google-research/bert tokenizer (`tokenization.py`:
BasicTokenizer + WordpieceTokenizer), the reference the in-graph and LiteRT tokenizers are
checked against on text the reference files do not hold."""

import unicodedata


def _is_control(char):
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


def _is_whitespace(char):
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_punctuation(char):
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(cp):
    ranges = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]  # fmt: skip
    return any(low <= cp <= high for low, high in ranges)


def original_ids(text, vocab_index, lower_case):
    if isinstance(text, bytes):
        text = text.decode("utf-8", "ignore")
    text = "".join(" " if _is_whitespace(c) else c for c in text if not (ord(c) in (0, 0xFFFD) or _is_control(c)))
    text = "".join(f" {c} " if _is_cjk(ord(c)) else c for c in text)
    words = []
    for token in text.strip().split():
        if lower_case:
            token = unicodedata.normalize("NFD", token.lower())
            token = "".join(c for c in token if unicodedata.category(c) != "Mn")
        current = ""
        for char in token:
            if _is_punctuation(char):
                words += [current, char] if current else [char]
                current = ""
            else:
                current += char
        words += [current] if current else []
    ids = []
    for word in words:
        pieces, start = [], 0
        while start < len(word) and len(word) <= 200:
            end = len(word)
            while end > start and ("##" if start else "") + word[start:end] not in vocab_index:
                end -= 1
            if end == start:
                break
            pieces.append(vocab_index[("##" if start else "") + word[start:end]])
            start = end
        ids += pieces if start == len(word) and pieces else [vocab_index["[UNK]"]]
    return ids
