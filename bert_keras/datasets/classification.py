"""Sentence(-pair) classification data for a `BertClassifier`: labelled texts, their
length-grouped training batches and the dev sets scored with a task's metric (GLUE's
in `glue.py`); your own TSV files with named columns (`tsv_data`)."""

import dataclasses
from pathlib import Path

import numpy as np

from bert_keras.datasets.metrics import accuracy
from bert_keras.datasets.task_data import TaskData
from bert_keras.datasets.tsv import read_labelled_tsv
from bert_keras.files import read_text
from bert_keras.tasks.distillation import TEACHER_OUTPUTS, teacher_labelled
from bert_keras.tasks.preprocessing import text_columns
from bert_keras.training.finetuning import length_grouped_batches


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


def label_examples(texts, labels, classes, path):
    """`Examples` of `texts` whose label strings become ids in `classes` (an unknown one is an error)."""
    unknown = sorted(set(labels) - set(classes))
    if unknown:
        raise ValueError(f"{path}: labels {unknown} are not among the classes {list(classes)}")
    return Examples([str(i) for i in range(len(labels))], texts, [classes.index(label) for label in labels])


def predictions_of(model, examples, batch_size, regression):
    """Class ids (or scores, `regression`) of `model` for `examples`."""
    outputs = model.predict(text_columns(examples.texts), batch_size=batch_size, verbose=0)
    return outputs[:, 0] if regression else np.argmax(outputs, axis=-1)


@dataclasses.dataclass
class ClassificationData(TaskData):
    """`train` and `devs` ({file name: `Examples`}) of `labels` (class names; None: a
    regression), scored by `score(labels, predictions) -> {metric: value}` on each dev
    set (prefixed by its name where there are several, MNLI's `matched_accuracy`, ...)."""

    train: Examples
    devs: dict
    labels: tuple
    score: object
    main_metric: str

    @property
    def regression(self):
        return self.labels is None

    @property
    def train_size(self):
        return len(self.train)

    @property
    def dev_size(self):
        return sum(len(dev) for dev in self.devs.values())

    def head_arguments(self):
        return {"num_classes": 1 if self.regression else len(self.labels), "labels": self.labels}

    def training_texts(self):
        return text_columns(self.train.texts)

    def teacher_outputs(self, teacher, batch_size=64):
        """A distillation `teacher`'s logits of every training example (float32), for `train_batches`."""
        return teacher.predict(text_columns(self.train.texts), batch_size=batch_size, verbose=0).astype("float32")

    def train_batches(self, batch_size, seed, teacher_outputs=None):
        """Length-grouped batches of (texts, labels), or with a distillation teacher's
        `teacher_outputs` (`teacher_outputs(teacher)`, computed once for every call), of
        (texts, {labels, teacher_outputs})."""
        targets = np.asarray(self.train.labels, "float32" if self.regression else "int32")
        columns = text_columns(self.train.texts)
        if teacher_outputs is not None:
            targets = {"labels": targets, TEACHER_OUTPUTS: teacher_outputs}
        lengths = sum(np.char.str_len(np.array(segment, dtype=str)) for segment in self.train.texts)
        return length_grouped_batches((columns, targets), lengths, batch_size, shuffle=True, seed=seed)

    def add_teacher_labelled(self, teacher, unlabeled_paths=(), augment=0, probability=0.4, seed=0, batch_size=64):
        """Adds the texts of `unlabeled_paths` (`read_unlabeled`) and `augment` copies of each
        training example to the training set, labelled by a distillation `teacher`
        (`tasks.distillation.teacher_labelled`). Returns how many it added."""
        unlabeled = read_unlabeled(unlabeled_paths, len(self.train.texts)) if unlabeled_paths else None
        count = len(self.train)
        self.train = teacher_labelled(teacher, self.train, unlabeled, augment, probability, seed, batch_size)
        return len(self.train) - count

    def evaluate(self, model, batch_size):
        metrics = {}
        for name, examples in self.devs.items():
            predicted = predictions_of(model, examples, batch_size, self.regression)
            prefix = "" if len(self.devs) == 1 else Path(name).stem.replace("dev_", "") + "_"
            metrics.update({prefix + k: v for k, v in self.score(examples.labels, predicted).items()})
        return metrics


def tsv_data(train_path, dev_path, classes=None, max_examples=None):
    """`ClassificationData` of TSV files with a header (text or text_a, optional text_b,
    label; other columns ignored) scored by accuracy; the classes are `classes` in
    label-id order, or the training file's distinct labels, sorted."""
    train_texts, train_labels = read_labelled_tsv(train_path)
    dev_texts, dev_labels = read_labelled_tsv(dev_path)
    if len(train_texts) != len(dev_texts):
        raise ValueError(f"{train_path} has {len(train_texts)} text column(s) but {dev_path} has {len(dev_texts)}")
    classes = list(classes or sorted(set(train_labels)))
    if len(classes) < 2:
        raise ValueError(f"{train_path}: need at least two classes, found {classes}")
    train = label_examples(train_texts, train_labels, classes, train_path).head(max_examples)
    dev = label_examples(dev_texts, dev_labels, classes, dev_path).head(max_examples)
    return ClassificationData(
        train,
        {Path(dev_path).name: dev},
        tuple(classes),
        lambda labels, predicted: {"accuracy": accuracy(labels, predicted)},
        "accuracy",
    )


def read_unlabeled(paths, segments):
    """Texts of unlabelled text files, one example a line (`segments` tab-separated texts
    for pairs), as one list per segment; blank lines are skipped."""
    texts = tuple([] for _ in range(segments))
    for path in paths:
        lines = read_text(path, "unlabeled text").splitlines()
        if not any(line.strip() for line in lines):
            raise ValueError(f"{path}: no text in this --unlabeled file")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != segments:
                raise ValueError(f"{path}:{number}: {len(fields)} tab-separated text(s); the teacher takes {segments}")
            for column, field in zip(texts, fields):
                column.append(field)
    return texts
