"""The text files beside a model's weights, each read and written in one place:
`vocab.txt` (one token a line), `labels.txt` (one class or tag name a line) and the
tokenizer's `tokenizer_config.json` (lower-casing and maximum length), plus the JSON
reader of the folder's other settings files."""

import dataclasses
import json
import os
import shutil
from pathlib import Path

from bert_keras.files import read_text

VOCAB = "vocab.txt"
LABELS = "labels.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"


def read_json(path):
    """The JSON of a settings file, or an error naming it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no {Path(path).name} at {path}") from None
    except ValueError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None


def read_json_object(path):
    """The JSON object of an optional settings file: {} when there is none."""
    if not Path(path).is_file():
        return {}
    content = read_json(path)
    if not isinstance(content, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(content).__name__}")
    return content


def saved_length(values, key):
    """`values[key]` if it is a length; None if missing or transformers' "no limit"
    placeholder (about 1e30)."""
    length = values.get(key)
    return length if isinstance(length, int) and 0 < length < 1_000_000 else None


# --- vocab.txt ---------------------------------------------------------------------------


def vocab_tokens(text):
    """The tokens of a vocab.txt's text: each line stripped, as the original; trailing
    empty lines dropped."""
    tokens = [line.strip() for line in text.split("\n")]
    while tokens and not tokens[-1]:
        tokens.pop()
    return tokens


def read_vocab(path):
    """The tokens of the vocab.txt at `path`."""
    return vocab_tokens(read_text(path, "vocab"))


def write_vocab(vocabulary, path):
    """Writes a vocab.txt at `path`: a list of tokens one a line, or a copy of the
    vocab.txt at the path `vocabulary` (unless it is that file)."""
    path = Path(path)
    if isinstance(vocabulary, (str, os.PathLike)):
        if Path(vocabulary).resolve() != path.resolve():
            shutil.copyfile(vocabulary, path)
        return path
    path.write_text("".join(f"{token}\n" for token in vocabulary), encoding="utf-8")
    return path


# --- labels.txt --------------------------------------------------------------------------


def read_labels(path):
    """The names in a labels.txt, in label-id order; None when there is no such file."""
    return read_text(path, "labels").splitlines() if Path(path).exists() else None


def write_labels(labels, path):
    """Writes a labels.txt at `path`: one name a line, in label-id order."""
    Path(path).write_text("".join(f"{label}\n" for label in labels), encoding="utf-8")


# --- tokenizer_config.json -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TokenizerSettings:
    """What a folder's tokenizer_config.json says: `lower_case` (`do_lower_case`, None
    when unsaid) and `max_length` (`model_max_length`, which transformers truncates
    and windows at; None when unsaid)."""

    lower_case: bool | None = None
    max_length: int | None = None


def read_tokenizer_config(folder):
    """The `TokenizerSettings` of the tokenizer_config.json in `folder` (none: all unsaid)."""
    values = read_json_object(Path(folder) / TOKENIZER_CONFIG)
    lower_case = bool(values["do_lower_case"]) if "do_lower_case" in values else None
    return TokenizerSettings(lower_case, saved_length(values, "model_max_length"))


def tokenizer_max_length(folder):
    """The maximum length tokenizer_config.json in `folder` gives its tokenizer; None when unsaid."""
    return read_tokenizer_config(folder).max_length


def infer_lower_case(vocab, saved_lower_case=None):
    """Uncased unless the tokenizer's settings say otherwise (`saved_lower_case`, or the
    tokenizer_config.json beside a vocab.txt path) or the vocabulary (a vocab.txt path
    or its tokens) holds upper-case word pieces (cased vocabularies hold thousands)."""
    if isinstance(vocab, (str, os.PathLike)):
        saved_lower_case = read_tokenizer_config(Path(vocab).parent).lower_case
        vocab = read_vocab(vocab)
    if saved_lower_case is not None:
        return saved_lower_case
    upper = sum(1 for token in vocab if not token.startswith("[") and token.lower() != token)
    return upper < 100


def write_tokenizer_config(path, lower_case, max_seq_length):
    """`tokenizer_config.json` beside a vocab.txt, so transformers' AutoTokenizer splits
    and truncates text as the model's preprocessor does."""
    values = {"tokenizer_class": "BertTokenizer", "do_lower_case": lower_case, "model_max_length": max_seq_length}
    (Path(path) / TOKENIZER_CONFIG).write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
