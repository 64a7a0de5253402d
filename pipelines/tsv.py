"""Your own data: sentence or sentence-pair classification from TSV files with a header.

Columns are found by name: `text` (or `text_a`), optional `text_b`, and `label`; other
columns are ignored. The classes are the training file's distinct labels, sorted, unless
`--labels` gives them in order. Writes `labels.txt` (one class a line, in label-id order)
beside `best.keras`, for `bert-keras export --labels`.

Example: `bert-keras finetune tsv --train train.tsv --dev dev.tsv --output-dir runs/mine`.
"""

import json
from pathlib import Path

from pipelines.arguments import InputPath, add_window_arguments

HELP = "your own TSV files with text [, text_b] and label columns"
DEFAULTS = dict(learning_rate=2e-5, epochs=3, batch_size=32, max_seq_length=128)


def add_arguments(parser):
    add_window_arguments(parser)
    parser.add_argument("--train", required=True, type=InputPath, help="training TSV (header: text [text_b] label)")
    parser.add_argument("--dev", required=True, type=InputPath, help="evaluation TSV, same columns")
    parser.add_argument("--labels", nargs="+", help="class names in label-id order (default: sorted training labels)")


def run(args):
    from bert_keras.checkpoint import write_labels
    from bert_keras.tasks.glue import accuracy, label_examples, read_labelled_tsv
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
    write_labels(classes, output_dir / "labels.txt")
    (output_dir / "best_metrics.json").write_text(json.dumps(best, indent=2) + "\n")
    return 0
