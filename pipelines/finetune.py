"""`bert-keras finetune glue|squad|conll|tsv|embedder|reranker`: the original fine-tuning recipe through `model.fit`.

Shared here: the common flags, the encoder/preprocessor set-up, a classifier's data
(GLUE and TSV: length-grouped batches) and `train`, which calls the library's run,
`bert_keras.recipes.finetune`: the optimiser (AdamW, linear warm-up over 10% of the
steps, then linear decay), evaluation with the task's official metric after every
epoch, the best model kept as `best.keras`, progress bars and TensorBoard logs.
"""

from pathlib import Path

from pipelines.arguments import (
    add_checkpoint_arguments,
    add_distribution_arguments,
    checkpoint_source,
    report_truncation,
    training_options,
)

TASK_MODULES = ("glue", "squad", "conll", "tsv", "embedder", "reranker")


def register(subparsers):
    parser = subparsers.add_parser(
        "finetune",
        help="fine-tune on GLUE, SQuAD, CoNLL-2003, your own TSV, or text pairs for embeddings",
        description=__doc__,
    )
    tasks = parser.add_subparsers(dest="task", required=True)
    import importlib

    for name in TASK_MODULES:
        module = importlib.import_module(f"pipelines.{name}")
        task_parser = tasks.add_parser(name, help=module.HELP, description=module.__doc__)
        add_common_arguments(task_parser, **module.DEFAULTS)
        module.add_arguments(task_parser)
        task_parser.set_defaults(func=in_fresh_output_dir(module.run))


# What a fine-tuning run writes into --output-dir (GLUE submissions are TASK.tsv).
RUN_FILES = {
    "best.keras",
    "best.weights.h5",
    "logs",
    "eval_results.json",
    "best_metrics.json",
    "labels.txt",
    "predictions.txt",
    "predictions.json",
    "nbest_predictions.json",
    "null_odds.json",
    "checkpoints",
    "sentence-transformers",
    "cross-encoder",
}


def in_fresh_output_dir(run):
    """`run(args)` into an empty `--output-dir`: a folder holding a run is refused unless
    `--overwrite`, which first removes that run's files (a new run must not leave an old
    submission beside its model, or add its curves to the old logs)."""

    def run_in_fresh_output_dir(args):
        import shutil

        output_dir = Path(args.output_dir)
        entries = sorted(path.name for path in output_dir.iterdir()) if output_dir.is_dir() else []
        if entries and not args.overwrite:
            raise FileExistsError(
                f"--output-dir {output_dir} is not empty "
                f"({', '.join(entries[:4])}{', ...' if len(entries) > 4 else ''}); "
                "pass --overwrite to replace the run in it, or choose another folder"
            )
        foreign = [name for name in entries if name not in RUN_FILES and not name.endswith(".tsv")]
        if foreign:
            raise FileExistsError(
                f"--overwrite: {output_dir} holds files no fine-tuning run writes ({', '.join(foreign[:4])}); "
                "not removing them: choose another folder"
            )
        for name in entries:
            path = output_dir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        return run(args)

    return run_in_fresh_output_dir


def add_common_arguments(parser, learning_rate=2e-5, epochs=3, batch_size=32, max_seq_length=128):
    add_checkpoint_arguments(parser)
    parser.add_argument(
        "--output-dir", required=True, help="best.keras, predictions, metrics, logs/; must be empty or new"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the fine-tuning run already in --output-dir")
    parser.add_argument("--epochs", type=float, default=epochs)
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--learning-rate", type=float, default=learning_rate)
    parser.add_argument("--warmup-proportion", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--max-seq-length", type=int, default=max_seq_length)
    parser.add_argument(
        "--new-head", action="store_true", help="start a new head even when --init holds a trained one of this task"
    )
    parser.add_argument("--max-train-steps", type=int, help="stop after this many updates (tests, time budgets)")
    parser.add_argument("--max-examples", type=int, help="use only the first N training and evaluation examples")
    parser.add_argument(
        "--max-train-minutes", type=float, help="time budget: stop after the step that exceeds it, then evaluate"
    )
    parser.add_argument("--eval-batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    add_distribution_arguments(parser)
    parser.add_argument("--jit-compile", action="store_true", help="compile the train step with XLA")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2), help="Keras progress output")


def training_setup(args, seq_length=None):
    """The `--strategy` (checked against `--batch-size`), `--mixed-precision` and
    `--seed` set, and the padded length: `seq_length` (None: dynamic), or always
    `--max-seq-length` on a TPU, which needs fixed shapes. Returns (strategy, seq_length)."""
    import keras

    from bert_keras.training import distribute

    strategy = distribute.resolve_strategy(args.strategy, tpu=args.tpu, devices=args.devices)
    distribute.check_global_batch(strategy, args.batch_size)
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy(distribute.mixed_precision_policy())
    keras.utils.set_random_seed(args.seed)
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


def train_classifier(args, train_examples, dev_sets, labels, score, main_metric):
    """Fine-tunes a `BertClassifier` on raw text in length-grouped batches (a regression
    head when `labels` is None, else one class per name), scoring every dev set with
    `score(labels, predictions)` after each epoch. Returns (model with the best
    weights, best metrics)."""
    import numpy as np

    from bert_keras.tasks.classifier import BertClassifier
    from bert_keras.tasks.glue import model_inputs, predictions_of
    from bert_keras.training.finetuning import length_grouped_batches

    regression = labels is None
    strategy, model = build_head(
        args,
        BertClassifier,
        num_classes=1 if regression else len(labels),
        labels=labels,
        doc_stride=args.doc_stride,
        window_pooling=args.window_pooling,
    )

    def evaluate(model):
        metrics = {}
        for name, examples in dev_sets.items():
            predicted = predictions_of(model, examples, args.eval_batch_size, regression)
            prefix = "" if len(dev_sets) == 1 else Path(name).stem.replace("dev_", "") + "_"
            metrics.update({prefix + k: v for k, v in score(examples.labels, predicted).items()})
        return metrics

    report_truncation(args, model.preprocessor, model_inputs(train_examples), "training examples")
    targets = np.asarray(train_examples.labels, "float32" if regression else "int32")
    lengths = sum(np.char.str_len(np.array(segment, dtype=str)) for segment in train_examples.texts)
    batches = length_grouped_batches(
        (model_inputs(train_examples), targets), lengths, args.batch_size, shuffle=True, seed=args.seed
    )
    best = train(model, args, batches, len(train_examples), evaluate, main_metric, strategy)
    return model, best


def train(
    model,
    args,
    train_batches,
    num_examples,
    evaluate,
    main_metric,
    strategy,
    preprocessed=False,
    loss="auto",
    on_best=None,
):
    """`bert_keras.recipes.finetune` with the command's flags. Returns the best metrics."""
    from bert_keras.recipes.finetuning import finetune

    run = finetune(
        model,
        train_batches,
        num_examples,
        evaluate,
        main_metric,
        output_dir=args.output_dir,
        on_best=on_best,
        loss=loss,
        preprocessed=preprocessed,
        strategy=strategy,
        **training_options(args),
        verbose=args.verbose,
    )
    return run.best
