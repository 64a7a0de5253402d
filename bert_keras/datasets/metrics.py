"""The official metrics the benchmarks share (numpy; the GLUE scorer and
sentence-transformers use sklearn/scipy): accuracy, F1 of the positive class, Matthews
correlation, Pearson and Spearman correlation; and the per-class breakdown a run shows
beside them (confusion counts, each class's precision, recall and F1)."""

import numpy as np


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


def precision_recall_f1(correct, gold, guessed):
    """{precision, recall, f1} of `correct` answers out of `gold` expected and `guessed`
    given (0 where a count is 0, as conlleval)."""
    precision = correct / guessed if guessed else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def confusion_matrix(labels, predictions, num_classes):
    """[num_classes, num_classes] counts: row the gold class id, column the predicted one."""
    labels, predictions = _arrays(labels, predictions)
    counts = np.zeros((num_classes, num_classes), "int64")
    np.add.at(counts, (labels, predictions), 1)
    return counts


def per_class_scores(confusion):
    """Each class's `precision_recall_f1` from a `confusion_matrix`, in class-id order."""
    confusion = np.asarray(confusion)
    return [
        precision_recall_f1(float(confusion[c, c]), float(confusion[c].sum()), float(confusion[:, c].sum()))
        for c in range(len(confusion))
    ]


def pearson(x, y):
    x, y = (np.asarray(v, "float64") for v in (x, y))
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x * x).sum() * (y * y).sum())
    return 0.0 if denominator == 0 else float((x * y).sum() / denominator)


def average_ranks(values):
    """1-based ranks, ties sharing their mean rank (scipy's rankdata 'average')."""
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


def _arrays(labels, predictions):
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape or labels.ndim != 1 or not len(labels):
        raise ValueError(
            f"labels and predictions must be non-empty 1-D and alike, got {labels.shape}, {predictions.shape}"
        )
    return labels, predictions
