"""The flags and set-up every `finetune` task shares: the common arguments, the head
built from `--init` in the `--strategy` scope, and `train`, which runs a benchmark's
`TaskData` through `bert_keras.recipes.finetune`."""

import json
from pathlib import Path

from bert_keras_cli.arguments import (
    add_checkpoint_arguments,
    add_training_arguments,
    checkpoint_source,
    report_truncation,
    training_options,
)
from bert_keras_cli.setup import set_up_training

# What a fine-tuning run writes into --output-dir (GLUE submissions are TASK.tsv).
RUN_FILES = {
    "best.keras",
    "best.weights.h5",
    "logs",
    "eval_results.json",
    "best_metrics.json",
    "labels.txt",
    "predictions.txt",
    "dev_predictions.tsv",
    "evaluations",
    "predictions.json",
    "nbest_predictions.json",
    "null_odds.json",
    "checkpoints",
    "sentence-transformers",
    "cross-encoder",
}


def add_common_arguments(parser, learning_rate=2e-5, epochs=3, batch_size=32, max_seq_length=128):
    add_checkpoint_arguments(parser)
    parser.add_argument(
        "--new-head", action="store_true", help="start a new head even when --init holds a trained one of this task"
    )
    add_training_arguments(
        parser,
        "best.keras, predictions, metrics, logs/; must be empty or new",
        "replace the fine-tuning run already in --output-dir",
        learning_rate,
        epochs,
        batch_size,
        max_seq_length,
        grid=True,
    )


def training_setup(args, seq_length=None):
    """The `--strategy` (checked against `--batch-size`), `--mixed-precision` and
    `--seed` set, and the padded length: `seq_length` (None: dynamic), or always
    `--max-seq-length` on a TPU, which needs fixed shapes. Returns (strategy, seq_length)."""
    from bert_keras.training import distribute

    strategy = set_up_training(args, args.batch_size)
    if distribute.needs_static_shapes(strategy):
        seq_length = args.max_seq_length
    return strategy, seq_length


def build_head(args, head_class, seq_length=None, **head_arguments):
    """`head_class.from_checkpoint(--init)` with its preprocessor (padding as
    `training_setup` says, up to `--max-seq-length`) inside the `--strategy` scope: a
    trained head of that kind in `--init` is kept unless `--new-head`. Returns (strategy, model)."""
    source = checkpoint_source(args.init)
    strategy, seq_length = training_setup(args, seq_length)
    with strategy.scope():
        model = head_class.from_checkpoint(
            source,
            vocab=args.vocab,
            lower_case=False if args.cased else None,
            seq_length=seq_length,
            max_seq_length=args.max_seq_length,
            new_head=args.new_head,
            **head_arguments,
        )
    config = model.encoder.config
    print(
        f"encoder {source}: L{config.num_hidden_layers}/H{config.hidden_size}, "
        f"lower_case={model.preprocessor.tokenizer.lower_case}"
    )
    return strategy, model


def train_classifier(args, data):
    """A `BertClassifier` of `data`'s classes (`--doc-stride`, `--window-pooling`) trained
    on it by `train`, truncation reported first. Returns (model with the best weights, best metrics)."""
    from bert_keras.tasks.classifier import BertClassifier

    strategy, model = build_head(
        args,
        BertClassifier,
        **data.head_arguments(),
        doc_stride=args.doc_stride,
        window_pooling=args.window_pooling,
        window_micro_batch=args.window_micro_batch,
    )
    report_truncation(args, model.preprocessor, data.training_texts(), "training examples")
    return model, train(args, strategy, model, data)


def train(args, strategy, model, data):
    """`bert_keras.recipes.finetune` of `model` on `data` (a `TaskData`) with the
    command's flags, the best epoch's predictions written as the benchmark writes them.
    Returns the best metrics."""
    from bert_keras.recipes.finetuning import finetune

    run = finetune(
        model,
        lambda: data.train_batches(args.batch_size, args.seed),
        data.train_size,
        lambda model: data.evaluate(model, args.eval_batch_size),
        data.main_metric,
        output_dir=args.output_dir,
        on_best=lambda metrics: data.write_predictions(args.output_dir),
        report=data.report,
        loss=data.loss,
        preprocessed=data.preprocessed,
        strategy=strategy,
        interim_evaluation=args.interim_evaluation,
        **training_options(args),
        verbose=args.verbose,
    )
    return run.best


def write_best_metrics(args, best):
    (Path(args.output_dir) / "best_metrics.json").write_text(json.dumps(best, indent=2) + "\n")
