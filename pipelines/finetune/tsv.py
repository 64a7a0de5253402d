"""Your own data: sentence or sentence-pair classification from TSV files with a header.

Columns are found by name: `text` (or `text_a`), optional `text_b`, and `label`; other
columns are ignored. The classes are the training file's distinct labels, sorted, unless
`--labels` gives them in order. Writes `labels.txt` (one class a line, in label-id order)
beside `best.keras`, for `bert-keras export --labels`.

Example: `bert-keras finetune tsv --train train.tsv --dev dev.tsv --output-dir runs/mine`.
"""

from pathlib import Path

from bert_keras_cli.arguments import InputPath, add_window_arguments

HELP = "your own TSV files with text [, text_b] and label columns"
DEFAULTS = dict(learning_rate=2e-5, epochs=3, batch_size=32, max_seq_length=128)


def add_arguments(parser):
    add_window_arguments(parser, trained=True)
    parser.add_argument("--train", required=True, type=InputPath, help="training TSV (header: text [text_b] label)")
    parser.add_argument("--dev", required=True, type=InputPath, help="evaluation TSV, same columns")
    parser.add_argument("--labels", nargs="+", help="class names in label-id order (default: sorted training labels)")


def run(args):
    from bert_keras.checkpoint.text_files import write_labels
    from bert_keras.datasets.classification import tsv_data
    from bert_keras_cli.finetune.common import train_classifier, write_best_metrics

    data = tsv_data(args.train, args.dev, args.labels, args.max_examples)
    classes = list(data.labels)
    print(f"{data.train_size} training and {data.dev_size} dev examples; classes {classes}")
    _, best = train_classifier(args, data)
    output_dir = Path(args.output_dir)  # written after training: a run that fails leaves no files
    write_labels(classes, output_dir / "labels.txt")
    write_best_metrics(args, best)
    return 0
