"""The fine-tuning run: the original recipe through `model.fit`.

AdamW with linear warm-up over a proportion of the steps then linear decay, epochs of
equal length (`training.finetuning.schedule`), the task's official metric after every
epoch with the best weights kept (`EvaluateAndKeepBest`), an optional wall-clock budget,
TensorBoard logs, and the best model written once, at the end, as `best.keras`.
"""

import json
import time
from typing import NamedTuple

import keras
import tensorflow as tf

from bert_keras.models.dtype import with_dtype
from bert_keras.models.encoder import set_recompute
from bert_keras.training import distribute
from bert_keras.training.callbacks import EvaluateAndKeepBest, StopAfterSteps, TensorBoard, TimeBudget
from bert_keras.training.finetuning import fitting_batch_size, schedule
from bert_keras.training.optimization import create_optimizer
from bert_keras.training.progress import fit_progress


class FinetuningRun(NamedTuple):
    """The model with the best epoch's weights, `fit`'s `History` (the official metrics
    as `val_<name>`), the best epoch's metrics and every epoch's (`evaluations`)."""

    model: keras.Model
    history: keras.callbacks.History
    best: dict
    evaluations: list


def finetune(
    model,
    train_batches,
    num_examples,
    evaluate,
    main_metric,
    *,
    output_dir,
    on_best=None,
    saved_model=None,
    batch_size=32,
    epochs=3,
    learning_rate=2e-5,
    warmup_proportion=0.1,
    weight_decay=0.01,
    max_train_steps=None,
    max_train_minutes=None,
    max_seq_length=None,
    loss="auto",
    preprocessed=False,
    strategy=None,
    jit_compile=False,
    recompute=False,
    verbose="auto",
):
    """Fine-tunes `model` (a task built in `strategy`'s scope) on `train_batches` of
    `num_examples`: raw samples batched at `batch_size` (the task's
    `preprocessed_dataset` packs them), or packed ones with `preprocessed=True`.
    `evaluate(model) -> {metric: value}` runs after every epoch (and `on_best(metrics)`
    when an epoch is the best so far); the weights of the best `main_metric` are kept
    and written, without optimizer state, as `output_dir/best.keras`, every epoch's
    metrics as `eval_results.json` and the curves under `logs/` (on the chief).
    `epochs` may be fractional; `max_train_steps` and `max_train_minutes` stop earlier.
    Each global batch is split into per-replica batches (an epoch's last, smaller batch
    is dropped; a set smaller than one batch is one smaller batch), padded to
    `max_seq_length` where the strategy needs static shapes (TPUs). `loss` goes to the
    task's `compile` ("auto": its default). `recompute` recomputes the encoders' layers in
    the backward pass (`BertEncoder(recompute=True)`). `saved_model` is what `best.keras` holds
    (default `model`; a `BertDistiller` keeps its student). Returns a `FinetuningRun`."""
    strategy = strategy or tf.distribute.get_strategy()
    fitted_batch = fitting_batch_size(num_examples, batch_size, strategy.num_replicas_in_sync)
    if fitted_batch != batch_size:  # the set's one batch, cut to the smaller size
        train_batches = train_batches.unbatch().batch(fitted_batch)
    steps_per_epoch, epochs, planned = schedule(num_examples, fitted_batch, epochs, max_train_steps)
    # Epochs are of equal length, so the plan may run a few steps past max_train_steps: stop at it.
    total = min(planned, max_train_steps or planned)
    set_recompute(model, recompute)
    with strategy.scope():
        optimizer = create_optimizer(learning_rate, total, int(warmup_proportion * total), weight_decay=weight_decay)
        model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)
    dataset = _replica_batches(model, train_batches, preprocessed, strategy, fitted_batch, max_seq_length)
    _print_plan(total, planned, epochs, steps_per_epoch, fitted_batch, learning_rate, warmup_proportion)
    with distribute.chief_path(output_dir, strategy) as output_dir:
        output_dir.mkdir(parents=True, exist_ok=True)
        keeper = EvaluateAndKeepBest(evaluate, main_metric, on_best)
        verbose, progress = fit_progress(verbose)
        stops = [TimeBudget(max_train_minutes)] if max_train_minutes else []
        stops += [StopAfterSteps(total, steps_per_epoch)] if total < planned else []
        start = time.perf_counter()
        history = model.fit(
            dataset,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            verbose=verbose,
            callbacks=[
                *progress,
                *stops,
                keeper,
                TensorBoard(str(output_dir / "logs"), update_freq=max(1, steps_per_epoch // 20)),
            ],
        )
        keeper.history.append({"train_seconds": round(time.perf_counter() - start, 1)})
        (output_dir / "eval_results.json").write_text(json.dumps(keeper.history, indent=2) + "\n")
        model.set_weights(keeper.best_weights)
        with_dtype(saved_model or model).save(output_dir / "best.keras")  # the model alone: no optimizer state
    print(
        f"best {main_metric}: {keeper.best[main_metric]:.4f} (epoch {keeper.best['epoch']}); "
        f"model in {output_dir / 'best.keras'}"
    )
    return FinetuningRun(model, history, keeper.best, keeper.history)


def _replica_batches(model, train_batches, preprocessed, strategy, batch_size, max_seq_length):
    """The training batches, packed unless `preprocessed`, repeated and split into per-replica
    batches (padded to `max_seq_length` where the strategy needs static shapes)."""
    batches = (train_batches if preprocessed else model.preprocessed_dataset(train_batches)).repeat()
    seq_length = max_seq_length if distribute.needs_static_shapes(strategy) else None
    return distribute.distribute_dataset(
        strategy,
        lambda _, context: distribute.split_global_batches(batches, batch_size, context, seq_length),
        batch_size,
    )


def _print_plan(total, planned, epochs, steps_per_epoch, batch_size, learning_rate, warmup_proportion):
    last_epoch = total - (epochs - 1) * steps_per_epoch
    print(
        f"training {total} steps ({epochs} epoch(s) of {steps_per_epoch}"
        + (f", the last {last_epoch}" if total < planned else "")
        + f"), batch {batch_size}, "
        f"lr {learning_rate} with {warmup_proportion:.0%} warm-up"
    )
