"""The text files a user hands to the CLI (TSV, JSON, CoNLL, vocab, sentences), read
so that a binary or non-UTF-8 file is an error naming the file, line and byte offset
instead of a bare `UnicodeDecodeError` (or a silent parse of garbage)."""

from pathlib import Path


def read_text(path, kind):
    """The text of the UTF-8 `kind` file at `path` (a leading BOM dropped).

    Raises FileNotFoundError when there is no such file and ValueError when its bytes
    are not UTF-8 text (an invalid sequence, or a NUL byte: a binary file)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {kind} file at {path}")
    return decode_text(path.read_bytes(), path, kind)


def decode_text(raw, path, kind):
    """`raw` bytes read from `path` as UTF-8 text, or the error `read_text` describes."""
    nul = raw.find(b"\0")
    if nul >= 0:
        raise ValueError(
            f"{path}: not a {kind} text file: a NUL byte at offset {nul} (line {_line_of(raw, nul)}); a binary file?"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}: not UTF-8 text: byte 0x{raw[error.start]:02x} at offset {error.start} "
            f"(line {_line_of(raw, error.start)}) is {error.reason}; save the {kind} "
            "file as UTF-8"
        ) from None


def _line_of(raw, offset):
    return raw.count(b"\n", 0, offset) + 1
