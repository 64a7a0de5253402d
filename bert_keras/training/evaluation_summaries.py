"""What each evaluation of a fine-tuning run shows beyond its metrics, for TensorBoard and
`bert-keras plot`: each class's precision, recall and F1, the confusion matrix of a
classifier and the dev examples it gets most wrong.

`EvaluationSummaries` writes them after every evaluation into the run's
`logs/validation` (beside Keras' `epoch_*` scalars, on the same epoch step: scalars
`epoch_<metric>/<class>`, the image `epoch_confusion_matrix`, the markdown table
`epoch_worst_errors`) and as `evaluations/epoch-<n>.json` in the run folder, which the
plot reads.
"""

import dataclasses
import html
import io
import json
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

REPORTS = "evaluations"  # the run folder's subfolder of epoch-<n>.json
WORST_ERRORS = 10  # the most confident wrong dev examples an evaluation lists
CONFUSION_TAG = "epoch_confusion_matrix"
WORST_ERRORS_TAG = "epoch_worst_errors"
# What Python-Markdown (TensorBoard's text dashboard) reads as markup unless backslash-escaped, and the table's pipe.
MARKDOWN_PUNCTUATION = set("\\`*_{}[]()>#+-.!|")


@dataclasses.dataclass
class EvaluationReport:
    """One evaluation's breakdown: `per_class` {class: {precision, recall, f1}} in
    `labels` order; a classifier's `confusion` (rows the gold class, columns the
    predicted one); `worst_errors`, the most confident wrong dev examples first, each
    {text, gold, predicted, confidence}."""

    labels: list
    per_class: dict
    confusion: list = None
    worst_errors: list = dataclasses.field(default_factory=list)


def most_confident_errors(texts, gold, predicted, confidence, count=WORST_ERRORS):
    """`worst_errors` rows of the `count` most confident answers `predicted` (strings:
    label names, tags) that differ from `gold`, most confident first."""
    wrong = [i for i in range(len(texts)) if gold[i] != predicted[i]]
    order = sorted(wrong, key=lambda i: -confidence[i])[:count]
    return [
        {"text": texts[i], "gold": gold[i], "predicted": predicted[i], "confidence": float(confidence[i])}
        for i in order
    ]


def report_path(output_dir, epoch):
    """The JSON report of 1-based `epoch` in a run folder."""
    return Path(output_dir) / REPORTS / f"epoch-{epoch}.json"


def read_report(output_dir, epoch):
    """The `EvaluationReport` a run wrote for 1-based `epoch`, or None where it wrote none."""
    path = report_path(output_dir, epoch)
    if not path.is_file():
        return None
    fields = json.loads(path.read_text(encoding="utf-8"))
    fields.pop("epoch")
    return EvaluationReport(**fields)


class EvaluationSummaries(keras.callbacks.Callback):
    """After each epoch (listed after the callback that evaluates), writes `report()`,
    the last evaluation's `EvaluationReport` (None: nothing to write), into
    `output_dir/logs/validation` and `output_dir/evaluations/epoch-<n>.json`."""

    def __init__(self, report, output_dir):
        super().__init__()
        self.report, self.output_dir = report, Path(output_dir)
        self.writer = None

    def on_epoch_end(self, epoch, logs=None):
        report = self.report()
        if report is None:
            return
        path = report_path(self.output_dir, epoch + 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"epoch": epoch + 1, **dataclasses.asdict(report)}, indent=2) + "\n")
        if self.writer is None:
            self.writer = tf.summary.create_file_writer(str(self.output_dir / "logs" / "validation"))
        with self.writer.as_default(step=epoch), tf.summary.record_if(True):
            for label, scores in report.per_class.items():
                for metric, value in scores.items():
                    tf.summary.scalar(f"epoch_{metric}/{label}", value)
            if report.confusion is not None:
                tf.summary.image(CONFUSION_TAG, confusion_image(report.confusion, report.labels))
            if report.worst_errors:
                tf.summary.text(WORST_ERRORS_TAG, worst_errors_markdown(report.worst_errors))
        self.writer.flush()

    def on_train_end(self, logs=None):
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def draw_confusion(axes, confusion, labels):
    """A confusion matrix on matplotlib `axes`: counts in the cells, gold classes down, predicted across."""
    confusion = np.asarray(confusion)
    axes.imshow(confusion, cmap="Blues")
    ticks = range(len(labels))
    # parse_math=False: a label name is text, never TeX (an unknown "$\foo$" would stop the run).
    axes.set_xticks(ticks, labels, rotation=45, ha="right", fontsize=8, parse_math=False)
    axes.set_yticks(ticks, labels, fontsize=8, parse_math=False)
    axes.set_xlabel("predicted")
    axes.set_ylabel("gold")
    threshold = confusion.max() / 2
    for (row, column), count in np.ndenumerate(confusion):
        color = "white" if count > threshold else "black"
        axes.text(column, row, str(count), ha="center", va="center", color=color, fontsize=8)
    axes.set_title("confusion matrix")


def confusion_image(confusion, labels):
    """A [1, height, width, 4] uint8 PNG rendering of `draw_confusion`, for `tf.summary.image`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    side = 2.5 + 0.4 * len(labels)
    figure = Figure(figsize=(side, side), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    draw_confusion(figure.add_subplot(), confusion, labels)
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return tf.image.decode_png(png.getvalue(), channels=4)[None]


def worst_errors_markdown(rows):
    """`worst_errors` as a `markdown_table` (text, gold, predicted, confidence)."""
    fields = ("text", "gold", "predicted", "confidence")
    return markdown_table(
        fields, [(row["text"], row["gold"], row["predicted"], f"{row['confidence']:.4f}") for row in rows]
    )


def markdown_table(header, rows):
    """A markdown table whose cells TensorBoard's text dashboard shows as written:
    markdown's punctuation and the table's pipes backslash-escaped, HTML's `&<>` as
    entities, line breaks as spaces."""

    def cell(value):
        text = html.escape(" ".join(str(value).split()), quote=False)
        return "".join("\\" + char if char in MARKDOWN_PUNCTUATION else char for char in text)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(cell(field) for field in row) + " |" for row in rows)
    return "\n".join(lines)
