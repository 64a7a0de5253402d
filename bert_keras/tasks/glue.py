"""GLUE for a `BertClassifier`: read any task's TSV files, score predictions with the
task's official metric, and write test predictions in the GLUE submission format.

`bert-keras finetune glue` (pipelines/glue.py) trains and scores with these.
"""

import dataclasses
from pathlib import Path

from bert_keras.files import read_text


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """Column layout of one task's files (0-based; negative counts from the end)."""

    name: str  # file name of the submission (CoLA.tsv, ...)
    text_columns: tuple
    label_column: int
    labels: tuple  # None for regression
    metric: str  # the main metric, used to keep the best model
    test_text_columns: tuple
    header: bool = True  # train/dev files have a header (test files always do)
    dev_files: tuple = ("dev.tsv",)
    test_files: tuple = ("test.tsv",)


TASKS = {
    "cola": GlueTask("CoLA", (3,), 1, ("0", "1"), "mcc", (1,), header=False),
    "sst-2": GlueTask("SST-2", (0,), 1, ("0", "1"), "accuracy", (1,)),
    "mrpc": GlueTask("MRPC", (3, 4), 0, ("0", "1"), "f1", (3, 4)),
    "sts-b": GlueTask("STS-B", (7, 8), 9, None, "pearson", (7, 8)),
    "qqp": GlueTask("QQP", (3, 4), 5, ("0", "1"), "f1", (1, 2)),
    "mnli": GlueTask(
        "MNLI",
        (8, 9),
        -1,
        ("contradiction", "entailment", "neutral"),
        "accuracy",
        (8, 9),
        dev_files=("dev_matched.tsv", "dev_mismatched.tsv"),
        test_files=("test_matched.tsv", "test_mismatched.tsv"),
    ),
    "qnli": GlueTask("QNLI", (1, 2), -1, ("entailment", "not_entailment"), "accuracy", (1, 2)),
    "rte": GlueTask("RTE", (1, 2), -1, ("entailment", "not_entailment"), "accuracy", (1, 2)),
    "wnli": GlueTask("WNLI", (1, 2), -1, ("0", "1"), "accuracy", (1, 2)),
}
ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "mnli-m": "mnli", "mnli-mm": "mnli"}
# Submission file names for the two MNLI test sets.
MNLI_SUBMISSIONS = {"test_matched.tsv": "MNLI-m", "test_mismatched.tsv": "MNLI-mm"}


@dataclasses.dataclass
class Examples:
    """Columns of one split: `guid`s, text segments (one list per segment), labels
    (class ids, float scores, or None for test files)."""

    guids: list
    texts: tuple
    labels: list = None

    def __len__(self):
        return len(self.guids)

    def head(self, n):
        if n is None:
            return self
        labels = None if self.labels is None else self.labels[:n]
        return Examples(self.guids[:n], tuple(t[:n] for t in self.texts), labels)


def get_task(name):
    """The `GlueTask` of a name or alias (a `GlueTask` is returned as it is)."""
    if isinstance(name, GlueTask):
        return name
    key = ALIASES.get(name.lower(), name.lower())
    if key not in TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; choose one of {sorted(TASKS)}")
    return TASKS[key]


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


def read_split(path, task, test=False):
    """`Examples` of a train/dev file (labelled) or a test file (`test=True`)."""
    task = get_task(task)
    rows = read_rows(path, header=True if test else task.header)
    columns = task.test_text_columns if test else task.text_columns
    needed = max(max(columns), task.label_column if not test else 0)
    guids, texts, labels = [], tuple([] for _ in columns), []
    for number, fields in rows:
        if needed >= len(fields):
            raise ValueError(f"{path}:{number}: malformed line: {len(fields)} fields, need column {needed}")
        guids.append(fields[0])
        for segment, column in zip(texts, columns):
            segment.append(fields[column])
        if test:
            continue
        label = fields[task.label_column]
        if task.labels is None:
            try:
                labels.append(float(label))
            except ValueError:
                raise ValueError(f"{path}:{number}: score {label!r} is not a number") from None
        elif label in task.labels:
            labels.append(task.labels.index(label))
        else:
            raise ValueError(f"{path}:{number}: label {label!r} is not one of {list(task.labels)}")
    return Examples(guids, texts, None if test else labels)


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


def label_examples(texts, labels, classes, path):
    """`Examples` of `texts` whose label strings become ids in `classes` (an unknown one is an error)."""
    unknown = sorted(set(labels) - set(classes))
    if unknown:
        raise ValueError(f"{path}: labels {unknown} are not among the classes {list(classes)}")
    return Examples([str(i) for i in range(len(labels))], texts, [classes.index(label) for label in labels])


# --- official metrics (numpy; the GLUE scorer uses sklearn/scipy) ---------------------


def accuracy(labels, predictions):
    labels, predictions = _arrays(labels, predictions)
    return float((labels == predictions).mean())


def f1(labels, predictions):
    """F1 of the positive class 1 (MRPC, QQP)."""
    labels, predictions = _arrays(labels, predictions)
    tp = float(((predictions == 1) & (labels == 1)).sum())
    fp = float(((predictions == 1) & (labels != 1)).sum())
    fn = float(((predictions != 1) & (labels == 1)).sum())
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def matthews_corrcoef(labels, predictions):
    """Binary Matthews correlation (CoLA); 0 when a marginal is empty, as sklearn."""
    labels, predictions = _arrays(labels, predictions)
    tp = float(((predictions == 1) & (labels == 1)).sum())
    tn = float(((predictions != 1) & (labels != 1)).sum())
    fp = float(((predictions == 1) & (labels != 1)).sum())
    fn = float(((predictions != 1) & (labels == 1)).sum())
    denominator = ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)) ** 0.5
    return 0.0 if denominator == 0 else (tp * tn - fp * fn) / denominator


def pearson(x, y):
    import numpy as np

    x, y = (np.asarray(v, "float64") for v in (x, y))
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x * x).sum() * (y * y).sum())
    return 0.0 if denominator == 0 else float((x * y).sum() / denominator)


def average_ranks(values):
    """1-based ranks, ties sharing their mean rank (scipy's rankdata 'average')."""
    import numpy as np

    values = np.asarray(values, "float64")
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + end + 1) / 2
            start = end
    return ranks


def spearman(x, y):
    return pearson(average_ranks(x), average_ranks(y))


def glue_metrics(task, labels, predictions):
    """The task's official metrics: MCC (CoLA), Pearson/Spearman (STS-B), accuracy and
    F1 (MRPC, QQP), accuracy (the rest)."""
    task = get_task(task)
    if task.labels is None:
        return {"pearson": pearson(predictions, labels), "spearman": spearman(predictions, labels)}
    if task.metric == "mcc":
        return {"mcc": matthews_corrcoef(labels, predictions), "accuracy": accuracy(labels, predictions)}
    if task.metric == "f1":
        return {"accuracy": accuracy(labels, predictions), "f1": f1(labels, predictions)}
    return {"accuracy": accuracy(labels, predictions)}


def _arrays(labels, predictions):
    import numpy as np

    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape or labels.ndim != 1 or not len(labels):
        raise ValueError(
            f"labels and predictions must be non-empty 1-D and alike, got {labels.shape}, {predictions.shape}"
        )
    return labels, predictions


def write_submission(path, task, guids, predictions):
    """A GLUE submission file: `index\\tprediction`, label names (or scores for STS-B)."""
    task = get_task(task)
    lines = ["index\tprediction"]
    for guid, prediction in zip(guids, predictions):
        value = f"{float(prediction):.3f}" if task.labels is None else task.labels[int(prediction)]
        lines.append(f"{guid}\t{value}")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


# --- predictions ----------------------------------------------------------------------


def predictions_of(model, examples, batch_size, regression):
    import numpy as np

    outputs = model.predict(model_inputs(examples), batch_size=batch_size, verbose=0)
    return outputs[:, 0] if regression else np.argmax(outputs, axis=-1)


def model_inputs(examples):
    """Raw text for `BertClassifier.fit`/`predict`: one segment's strings, or a tuple of two."""
    import numpy as np

    texts = tuple(np.array(segment, dtype=object) for segment in examples.texts)
    return texts[0] if len(texts) == 1 else texts
