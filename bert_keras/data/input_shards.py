"""Input shards: the plan that cuts the input bytes into shards, and the reading of one shard.

The unit of work is an input shard: the documents that start in one slice of the input
bytes (the input files in order, read as one stream; `shard_bytes` per slice, or
`num_shards` equal slices). A document starts at the beginning of a file, at a blank
line in "lines" files and at the blank line before a chapter heading in "prose" files
(see `documents`), so a shard's documents are exactly those a whole-file read gives.
"""

import bisect
import dataclasses
import os

import tensorflow as tf

from bert_keras.data.documents import detect_text_format, is_heading, parse_documents
from bert_keras.data.tfrecords import shard_names

# ~40 MB of records held per worker at dupe factor 10, ~250 documents of a novel's chapter size;
# small enough that N workers share out even a few shards evenly.
DEFAULT_SHARD_BYTES = 2 << 20
# Longer lines are dropped with a warning: no sentence is that long, and the recipe cuts
# over-long segments one random draw per token (a 50 MB line would take minutes).
MAX_LINE_BYTES = 1 << 20
_BINARY_PROBE_BYTES = 8192


@dataclasses.dataclass(frozen=True)
class Shard:
    """Input shard `index`: the documents starting in byte range [start, end) of each span's file."""

    index: int
    output: str
    spans: tuple  # ((path, format, start, end), ...)


def probe_inputs(input_files, format="auto"):
    """Input files -> (inputs, skipped); reads only the head of each file.

    `inputs` lists each usable file's path, size and document format; `skipped` names
    each empty or binary file and why (they make no documents).
    """
    inputs, skipped = [], []
    for path in input_files:
        path = str(path)
        size = tf.io.gfile.stat(path).length
        with tf.io.gfile.GFile(path, "rb") as file:
            head = file.read(_BINARY_PROBE_BYTES)
            if not head:
                skipped.append({"path": path, "reason": "empty file"})
                continue
            if b"\0" in head:
                skipped.append({"path": path, "reason": f"binary file (NUL byte at offset {head.index(0)})"})
                continue
            file_format = format
            if format == "auto":
                file.seek(0)
                lines = [file.readline() for _ in range(2000)]  # what detect_text_format looks at
                file_format = detect_text_format(b"".join(lines).decode("utf-8", errors="ignore"))
        inputs.append({"path": path, "bytes": size, "format": file_format})
    return inputs, skipped


def shard_cuts(total, shard_bytes=DEFAULT_SHARD_BYTES, num_shards=None):
    """The byte offsets in the input stream where shards begin, and its end."""
    if num_shards is not None:
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}")
        return [total * k // num_shards for k in range(num_shards + 1)]
    if shard_bytes < 1:
        raise ValueError(f"shard_bytes must be >= 1, got {shard_bytes}")
    return [*range(0, total, shard_bytes), total] if total else [0, 0]


def _shard_spans(inputs, cuts):
    """Each shard's (path, format, start, end) spans: the part of each file between its cuts."""
    spans = [[] for _ in cuts[1:]]
    base = 0  # of the file in the input stream
    for item in inputs:
        end = base + item["bytes"]
        k = bisect.bisect_right(cuts, base) - 1  # the first shard that can hold bytes of this file
        while k < len(spans) and cuts[k] < end:
            start, stop = max(cuts[k], base) - base, min(cuts[k + 1], end) - base
            if start < stop:
                spans[k].append((item["path"], item["format"], start, stop))
            k += 1
        base = end
    return spans


def plan_shards(input_files, output, shard_bytes=DEFAULT_SHARD_BYTES, num_shards=None, format="auto"):
    """Input files -> (inputs, skipped, shards); reads only the head of each file (see `probe_inputs`)."""
    inputs, skipped = probe_inputs(input_files, format)
    cuts = shard_cuts(sum(item["bytes"] for item in inputs), shard_bytes, num_shards)
    names = [os.path.basename(name) for name in shard_names(output, len(cuts) - 1)]
    spans = _shard_spans(inputs, cuts)
    return inputs, skipped, [Shard(k, name, tuple(spans[k])) for k, name in enumerate(names)]


def _is_blank(line):
    return not line.decode("utf-8", errors="ignore").strip()


def _is_heading(line):
    return is_heading(line.decode("utf-8", errors="ignore").strip())


def document_start(file, offset, format, size):
    """The first offset >= `offset` where a document starts (or `size`), in an open binary file.

    "lines": the start of a blank line. "prose": the start of the blank line just before
    a one-line heading paragraph. Cutting a file at such offsets splits no document.
    """
    if offset <= 0:
        return 0
    if offset >= size:
        return size
    file.seek(offset - 1)
    file.readline()  # now at the first line that starts at or after `offset`
    blank_at = None
    while True:
        position = file.tell()
        line = file.readline()
        if not line:
            return size
        if _is_blank(line):
            if format == "lines":
                return position
            blank_at = position
            continue
        if blank_at is not None and _is_heading(line):
            after = file.readline()
            if not after or _is_blank(after):
                return blank_at
        blank_at = None


def _line_number(path, offset):
    with tf.io.gfile.GFile(path, "rb") as file:
        line, done = 1, 0
        while done < offset:
            chunk = file.read(min(1 << 20, offset - done))
            line += chunk.count(b"\n")
            done += len(chunk)
        return line


def _drop_long_lines(raw, path, first, warnings):
    lines = raw.split(b"\n")
    long = [i for i, line in enumerate(lines) if len(line) > MAX_LINE_BYTES]
    if not long:
        return raw
    line_number = _line_number(path, first)
    for i in long:
        warnings.append(
            f"{path}:{line_number + i}: a line of {len(lines[i])} bytes (over {MAX_LINE_BYTES}) "
            "is not a sentence; skipped"
        )
    return b"\n".join(line for i, line in enumerate(lines) if len(line) <= MAX_LINE_BYTES)


def read_shard(shard):
    """A shard's documents (lists of sentences) and warnings about its input."""
    documents, warnings = [], []
    for path, format, start, end in shard.spans:
        size = tf.io.gfile.stat(path).length
        with tf.io.gfile.GFile(path, "rb") as file:
            first = document_start(file, start, format, size)
            last = document_start(file, end, format, size)
            file.seek(first)
            raw = file.read(last - first)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            text = None
            at = first + error.start
            warnings.append(
                f"{path}:{_line_number(path, at)}: invalid UTF-8 at byte {at}; "
                "invalid bytes are dropped, as the original tool does"
            )
        if len(raw) > MAX_LINE_BYTES:
            kept = _drop_long_lines(raw, path, first, warnings)
            if kept is not raw:
                raw, text = kept, None
        if text is None:
            text = raw.decode("utf-8", errors="ignore")
        documents.extend(parse_documents(text, format))
    return documents, warnings


def describe_shard(shard):
    """The shard's input spans, for messages."""
    return ", ".join(f"{path} bytes {start}-{end}" for path, _, start, end in shard.spans) or "no input"
