"""The official metrics the benchmarks share (numpy; the GLUE scorer and
sentence-transformers use sklearn/scipy): accuracy, F1 of the positive class, Matthews
correlation, Pearson and Spearman correlation."""

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
