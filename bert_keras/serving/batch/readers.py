"""Input rows of `predict`, read a line at a time (memory does not grow with the file):
`.txt` (a text a line), `.tsv` / `.csv` with a header, `.jsonl`, `.parquet` (when
pyarrow is installed). Each row is a `Row`: its id (the `id_column`'s value, else
`FILE:LINE`), its texts by segment name, or the error that makes it unreadable
(invalid UTF-8, a NUL byte, a missing column, a line that is not JSON)."""

import contextlib
import csv
import glob
import json
import os
from pathlib import Path
from typing import NamedTuple

READERS = (".txt", ".tsv", ".csv", ".jsonl", ".parquet")


class Row(NamedTuple):
    id: str
    texts: dict | None  # segment name -> text; None when the row is bad
    error: str | None = None


def input_files(patterns):
    """The files that `patterns` (paths or globs) name, in the order given (a glob's
    matches sorted); one that names nothing, or a file of no known kind, is an error."""
    files = []
    for pattern in map(str, patterns):  # paths as `Path`s too
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches or not os.path.isfile(matches[0]):
            raise FileNotFoundError(f"no input file matches {pattern}")
        for match in matches:
            if Path(match).suffix not in READERS:
                raise ValueError(
                    f"{match}: cannot read {Path(match).suffix or 'a file without a suffix'}; "
                    f"inputs are {', '.join(READERS)}"
                )
        files.extend(matches)
    return files


def decoded_lines(path):
    """(line number, text or None, error or None) for each line of `path`, its line end dropped."""
    with open(path, "rb") as stream:
        for number, raw in enumerate(stream, start=1):
            raw = raw.rstrip(b"\n").rstrip(b"\r")
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            nul = raw.find(b"\0")
            if nul >= 0:
                yield number, None, f"{path}:{number}: a NUL byte at column {nul + 1}; a binary file?"
                continue
            try:
                yield number, raw.decode("utf-8"), None
            except UnicodeDecodeError as error:
                yield (
                    number,
                    None,
                    (f"{path}:{number}: not UTF-8 text: byte 0x{raw[error.start]:02x} at column {error.start + 1}"),
                )


class RowReader:
    """The rows of `files` with texts for `segments`, whose columns `columns` maps
    (segment -> column; default: the segment's own name; a `.txt` line is the one text
    of a one-segment model). `id_column` names the column of row ids; `list_segment`,
    the segment whose value is a list of texts (a multiple-choice model's choices)."""

    def __init__(self, files, segments, columns=None, id_column=None, list_segment=None):
        self.files, self.segments = list(files), tuple(segments)
        self.columns = {segment: (columns or {}).get(segment, segment) for segment in self.segments}
        unknown = sorted(set(columns or {}) - set(self.segments))
        if unknown:
            raise ValueError(f"--column names {unknown}, which the model does not read; it reads {list(segments)}")
        self.id_column, self.list_segment = id_column, list_segment

    def __iter__(self):
        for path in self.files:
            suffix = Path(path).suffix
            if suffix == ".txt":
                rows = self._text_rows(path)
            elif suffix == ".jsonl":
                rows = self._json_rows(path)
            elif suffix == ".parquet":
                rows = self._parquet_rows(path)
            else:
                rows = self._table_rows(path, "\t" if suffix == ".tsv" else ",")
            empty = True
            for row in rows:
                empty = False
                yield row
            if empty:
                raise ValueError(f"{path}: no rows to predict (an empty file)")

    def _row(self, path, number, values):
        """A `Row` of a dict of column values."""
        missing = [column for column in self.columns.values() if column not in values]
        row_id = f"{path}:{number}"
        if self.id_column is not None:
            if self.id_column not in values:
                missing.append(self.id_column)
            else:
                row_id = str(values[self.id_column])
        if missing:
            return Row(row_id, None, f"{path}:{number}: no column {', '.join(map(repr, missing))}")
        texts = {}
        for segment, column in self.columns.items():
            texts[segment] = text = self._value(segment, values[column])
            if text is None:
                kind = "a list of strings (a JSON list in a table)" if segment == self.list_segment else "a string"
                return Row(row_id, None, f"{path}:{number}: column {column!r} is not {kind}")
        return Row(row_id, texts)

    def _value(self, segment, value):
        """A column's text, or a list segment's texts; None when it is neither."""
        if segment != self.list_segment:
            return value if isinstance(value, str) else None
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return None
        if isinstance(value, list) and value and all(isinstance(text, str) for text in value):
            return value
        return None

    def _text_rows(self, path):
        if len(self.segments) != 1:
            raise ValueError(
                f"{path}: a .txt file holds one text a line; the model reads {list(self.segments)} "
                "(use a .tsv, .csv or .jsonl file with those columns)"
            )
        if self.id_column is not None:
            raise ValueError(f"{path}: a .txt file has no columns; --id-column is for tables and JSON lines")
        for number, text, error in decoded_lines(path):
            yield Row(f"{path}:{number}", None, error) if error else Row(f"{path}:{number}", {self.segments[0]: text})

    def _json_rows(self, path):
        for number, text, error in decoded_lines(path):
            if error is None and not text.strip():
                continue
            if error is None:
                try:
                    values = json.loads(text)
                except json.JSONDecodeError as bad:
                    error = f"{path}:{number}: not JSON: {bad.msg} at column {bad.colno}"
                else:
                    if not isinstance(values, dict):
                        error = f"{path}:{number}: a JSON line must be an object of columns"
            yield Row(f"{path}:{number}", None, error) if error else self._row(path, number, values)

    def _table_rows(self, path, delimiter):
        bad = []  # the unreadable lines met since the last row, given out before it

        def good_lines():
            for number, text, error in decoded_lines(path):
                if error:
                    bad.append(Row(f"{path}:{number}", None, error))
                    continue
                yield text

        reader = csv.reader(good_lines(), delimiter=delimiter)
        header = next(reader, None)
        last_line, skipped = reader.line_num, 0
        for values in reader:
            # The row's first line, counting the unreadable lines the reader was not given.
            skipped += len(bad)
            number, last_line = last_line + 1 + skipped, reader.line_num
            yield from bad
            bad.clear()
            if not values:
                continue  # a blank line
            if len(values) != len(header):
                yield Row(
                    f"{path}:{number}", None, f"{path}:{number}: {len(values)} fields, the header has {len(header)}"
                )
                continue
            yield self._row(path, number, dict(zip(header, values)))
        yield from bad

    def _parquet_rows(self, path):
        number = 0
        with parquet_errors(path):
            for batch in parquet_file(path).iter_batches(batch_size=1024):
                for values in batch.to_pylist():
                    number += 1
                    yield self._row(path, number, values)


def parquet_file(path):
    """The `pyarrow.parquet.ParquetFile` at `path`; a file that is not one (a truncated
    file has no footer) is an error naming it."""
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise ValueError(f"{path}: reading .parquet needs pyarrow (pip install pyarrow)") from None
    with parquet_errors(path):
        return parquet.ParquetFile(path)


@contextlib.contextmanager
def parquet_errors(path):
    """pyarrow's errors reading `path` as one line naming the file."""
    import pyarrow as pa

    try:
        yield
    except (pa.ArrowException, OSError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{path}: not a readable .parquet file: {first}") from None


def count_rows(files):
    """About how many rows `files` hold (lines; a table's header not counted), for the ETA."""
    total = 0
    for path in files:
        if Path(path).suffix == ".parquet":
            total += parquet_file(path).metadata.num_rows
            continue
        with open(path, "rb") as stream:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: stream.read(1 << 20), b""))
        total += lines - (Path(path).suffix in (".tsv", ".csv"))
    return max(total, 0)
