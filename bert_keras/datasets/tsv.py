"""Tab-separated files as the benchmarks write them: GLUE's rows, and files whose header
names their columns (your own classification data, embedder and reranker pairs)."""

from pathlib import Path

from bert_keras.files import read_text


def read_rows(path, header):
    """(line number, fields) of every data row of a GLUE TSV file.

    UTF-8 with or without BOM, LF or CRLF, final newline optional. No quoting: GLUE
    texts contain bare `"` characters (as the original reader, `quotechar=None`).
    Rows must have as many fields as the header (or as the first row)."""
    path = Path(path)
    text = read_text(path, "TSV")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    rows = []
    width = None
    for number, line in enumerate(lines, start=1):
        fields = line.rstrip("\r").split("\t")
        if width is None:
            width = len(fields)
            if header:
                continue
        if len(fields) != width:
            raise ValueError(f"{path}:{number}: malformed line: {len(fields)} tab-separated fields, expected {width}")
        rows.append((number, fields))
    return rows


def read_labelled_tsv(path):
    """(texts, label strings) of a TSV file whose header names its columns."""
    path = Path(path)
    rows = read_rows(path, header=False)
    if not rows:
        raise ValueError(f"{path}: empty file; need a header (text [text_b] label) and examples")
    (_, header), rows = rows[0], rows[1:]
    first = "text" if "text" in header else "text_a"
    missing = [name for name in (first, "label") if name not in header]
    if missing:
        raise ValueError(
            f"{path}: header {header} lacks column(s) {missing}; need text (or text_a), label and optionally text_b"
        )
    columns = [header.index(first)] + ([header.index("text_b")] if "text_b" in header else [])
    label_column = header.index("label")
    texts, labels = tuple([] for _ in columns), []
    for _, fields in rows:
        for segment, column in zip(texts, columns):
            segment.append(fields[column])
        labels.append(fields[label_column])
    if not labels:
        raise ValueError(f"{path}: no examples below the header")
    return texts, labels
