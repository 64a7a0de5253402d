"""Sentence(-pair) classification data for a `BertClassifier`: labelled texts, their
length-grouped training batches and the dev sets scored with a task's metric (GLUE's
in `glue.py`); your own TSV files with named columns (`tsv_data`)."""

import dataclasses
from pathlib import Path

import numpy as np
import tensorflow as tf

from bert_keras.datasets.metrics import accuracy, confusion_matrix, per_class_scores
from bert_keras.datasets.task_data import TaskData
from bert_keras.datasets.tsv import read_labelled_tsv
from bert_keras.files import read_text
from bert_keras.tasks.distillation import TEACHER_OUTPUTS, teacher_labelled
from bert_keras.tasks.preprocessing import text_columns
from bert_keras.training.evaluation_summaries import EvaluationReport, most_confident_errors
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
    return predictions_from(model.predict(text_columns(examples.texts), batch_size=batch_size, verbose=0), regression)


def predictions_from(outputs, regression):
    """Class ids (or scores, `regression`) of a classifier's `outputs` (logits or scores)."""
    return outputs[:, 0] if regression else np.argmax(outputs, axis=-1)


def mean_loss(outputs, labels, regression):
    """The training loss of a classifier's `outputs` averaged over `labels`: softmax
    cross-entropy of the logits, or mean squared error of the scores (`regression`); a
    continuous measure beside the metrics, which tie where predictions agree."""
    outputs = tf.cast(outputs, tf.float32)
    if regression:
        return float(tf.reduce_mean(tf.square(outputs[:, 0] - tf.constant(labels, tf.float32))))
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.constant(labels, tf.int32), outputs)
    return float(tf.reduce_mean(losses))


@dataclasses.dataclass
class ClassificationData(TaskData):
    """`train` and `devs` ({file name: `Examples`}) of `labels` (class names; None: a
    regression), scored by `score(labels, predictions) -> {metric: value}` and the mean
    `loss` on each dev set (prefixed by its name where there are several, MNLI's
    `matched_accuracy`, `matched_loss`, ...)."""

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
        self.outputs = {}  # the last evaluation's, by dev set: for `write_predictions` and `report`
        for name, examples in self.devs.items():
            self.outputs[name] = model.predict(text_columns(examples.texts), batch_size=batch_size, verbose=0)
            predicted = predictions_from(self.outputs[name], self.regression)
            prefix = "" if len(self.devs) == 1 else Path(name).stem.replace("dev_", "") + "_"
            scores = {
                **self.score(examples.labels, predicted),
                "loss": mean_loss(self.outputs[name], examples.labels, self.regression),
            }
            metrics.update({prefix + k: v for k, v in scores.items()})
        return metrics

    def dev_predictions(self, name):
        """(predicted ids, confidences: their softmax probabilities) of dev set `name` in the last evaluation."""
        probabilities = tf.nn.softmax(tf.cast(self.outputs[name], tf.float32)).numpy()
        return np.argmax(probabilities, axis=-1), probabilities.max(axis=-1)

    def write_predictions(self, output_dir):
        """The last evaluation's dev predictions as `dev_predictions.tsv`: dev set, guid,
        text column(s), gold and predicted label (scores for a regression) and the
        prediction's probability (no column for a regression)."""
        segments = ["text"] if len(self.train.texts) == 1 else ["text_a", "text_b"]
        answers = ["gold", "predicted"] if self.regression else ["gold", "predicted", "confidence"]
        lines = ["\t".join(["dev_set", "guid", *segments, *answers])]
        for name, examples in self.devs.items():
            if self.regression:
                rows = zip(examples.labels, predictions_from(self.outputs[name], True))
            else:
                ids, confidence = self.dev_predictions(name)
                rows = zip(
                    (self.labels[i] for i in examples.labels),
                    (self.labels[i] for i in ids),
                    (f"{value:.6f}" for value in confidence),
                )
            for guid, *texts, row in zip(examples.guids, *examples.texts, rows):
                lines.append("\t".join([name, guid, *texts, *map(str, row)]))
        (Path(output_dir) / "dev_predictions.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def report(self):
        """Per-class scores, confusion and worst errors on the first dev set (MNLI's matched)."""
        if self.regression:
            return None
        name, examples = next(iter(self.devs.items()))
        predicted, confidence = self.dev_predictions(name)
        confusion = confusion_matrix(examples.labels, predicted, len(self.labels))
        texts = [" [SEP] ".join(segments) for segments in zip(*examples.texts)]
        return EvaluationReport(
            list(self.labels),
            dict(zip(self.labels, per_class_scores(confusion))),
            confusion.tolist(),
            most_confident_errors(
                texts, [self.labels[i] for i in examples.labels], [self.labels[i] for i in predicted], confidence
            ),
        )


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
