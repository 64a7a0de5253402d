"""GLUE for a `BertClassifier`: read any task's TSV files, score predictions with the
task's official metric, and write test predictions in the GLUE submission format.

`glue_data` is a task's `ClassificationData`, which `bert-keras finetune glue` and
`distill --task` train and score with.
"""

import dataclasses
from pathlib import Path

from bert_keras.datasets.classification import ClassificationData, Examples, predictions_of
from bert_keras.datasets.metrics import accuracy, f1, matthews_corrcoef, pearson, spearman
from bert_keras.datasets.tsv import read_rows


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


def get_task(name):
    """The `GlueTask` of a name or alias (a `GlueTask` is returned as it is)."""
    if isinstance(name, GlueTask):
        return name
    key = ALIASES.get(name.lower(), name.lower())
    if key not in TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; choose one of {sorted(TASKS)}")
    return TASKS[key]


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


def write_submission(path, task, guids, predictions):
    """A GLUE submission file: `index\\tprediction`, label names (or scores for STS-B)."""
    task = get_task(task)
    lines = ["index\tprediction"]
    for guid, prediction in zip(guids, predictions):
        value = f"{float(prediction):.3f}" if task.labels is None else task.labels[int(prediction)]
        lines.append(f"{guid}\t{value}")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def glue_data(data_dir, task, max_examples=None):
    """`ClassificationData` of a task's folder: train.tsv and the task's dev files (the
    first `max_examples` of each), scored by `glue_metrics`; with two dev sets (MNLI)
    the best model is kept by the matched one's metric."""
    task = get_task(task)
    data_dir = Path(data_dir)
    train = read_split(data_dir / "train.tsv", task).head(max_examples)
    devs = {name: read_split(data_dir / name, task).head(max_examples) for name in task.dev_files}
    return ClassificationData(
        train,
        devs,
        task.labels,
        lambda labels, predicted: glue_metrics(task, labels, predicted),
        task.metric if len(devs) == 1 else f"matched_{task.metric}",
    )


def read_test_sets(data_dir, task, max_examples=None):
    """{test file name: `Examples`} of a task's folder (the first `max_examples` of each)."""
    task = get_task(task)
    return {name: read_split(Path(data_dir) / name, task, test=True).head(max_examples) for name in task.test_files}


def write_submissions(model, test_sets, task, output_dir, batch_size):
    """Writes `model`'s predictions of `test_sets` as submission files in `output_dir`.
    Returns [(file, examples)]."""
    task = get_task(task)
    written = []
    for name, examples in test_sets.items():
        predicted = predictions_of(model, examples, batch_size, task.labels is None)
        target = Path(output_dir) / f"{MNLI_SUBMISSIONS.get(name, task.name)}.tsv"
        write_submission(target, task, examples.guids, predicted)
        written.append((target, len(examples)))
    return written
