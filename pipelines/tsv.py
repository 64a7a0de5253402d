"""Your own data: sentence or sentence-pair classification from TSV files with a header.

Columns are found by name: `text` (or `text_a`), optional `text_b`, and `label`; other
columns are ignored. The classes are the training file's distinct labels, sorted, unless
`--labels` gives them in order. Writes `labels.txt` (one class a line, in label-id order)
beside `best.keras`, for `bert-keras export --labels`.

Example: `bert-keras finetune tsv --train train.tsv --dev dev.tsv --output-dir runs/mine`.
"""

import json
from pathlib import Path

from pipelines.arguments import InputPath

HELP = "your own TSV files with text [, text_b] and label columns"
DEFAULTS = dict(learning_rate=2e-5, epochs=3, batch_size=32, max_seq_length=128)


def add_arguments(parser):
    parser.add_argument("--train", required=True, type=InputPath, help="training TSV (header: text [text_b] label)")
    parser.add_argument("--dev", required=True, type=InputPath, help="evaluation TSV, same columns")
    parser.add_argument("--labels", nargs="+", help="class names in label-id order (default: sorted training labels)")


def read_labelled_tsv(path):
    """(texts, label strings) of a TSV file whose header names its columns."""
    from bert_keras.tasks.glue import read_rows

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
    from bert_keras.tasks.glue import Examples

    unknown = sorted(set(labels) - set(classes))
    if unknown:
        raise ValueError(f"{path}: labels {unknown} are not among the classes {list(classes)}")
    return Examples([str(i) for i in range(len(labels))], texts, [classes.index(label) for label in labels])


def run(args):
    from bert_keras.tasks.glue import accuracy
    from pipelines.finetune import train_classifier

    train_texts, train_labels = read_labelled_tsv(args.train)
    dev_texts, dev_labels = read_labelled_tsv(args.dev)
    if len(train_texts) != len(dev_texts):
        raise ValueError(f"{args.train} has {len(train_texts)} text column(s) but {args.dev} has {len(dev_texts)}")
    classes = list(args.labels or sorted(set(train_labels)))
    if len(classes) < 2:
        raise ValueError(f"{args.train}: need at least two classes, found {classes}")
    train_examples = label_examples(train_texts, train_labels, classes, args.train).head(args.max_examples)
    dev_examples = label_examples(dev_texts, dev_labels, classes, args.dev).head(args.max_examples)
    print(f"{len(train_examples)} training and {len(dev_examples)} dev examples; classes {classes}")
    _, best = train_classifier(
        args,
        train_examples,
        {Path(args.dev).name: dev_examples},
        classes,
        lambda labels, predicted: {"accuracy": accuracy(labels, predicted)},
        "accuracy",
    )
    output_dir = Path(args.output_dir)  # written after training: a run that fails leaves no files
    (output_dir / "labels.txt").write_text("".join(f"{name}\n" for name in classes), encoding="utf-8")
    (output_dir / "best_metrics.json").write_text(json.dumps(best, indent=2) + "\n")
    return 0
