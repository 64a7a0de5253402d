"""The fine-tuning run: the original recipe through `model.fit`.

AdamW with linear warm-up over a proportion of the steps then linear decay, epochs of
equal length (`training.finetuning.schedule`), the task's official metric after every
epoch with the best weights kept (`EvaluateAndKeepBest`) and its per-class breakdown
(`EvaluationSummaries`), an optional wall-clock budget, TensorBoard logs, the best model
written once, at the end, as `best.keras`, and backups of the run (`StepBackup`) from
which it resumes after a kill.
"""

import functools
import json
from pathlib import Path
from typing import NamedTuple

import keras
import tensorflow as tf

from bert_keras.models.dtype import with_dtype
from bert_keras.models.encoder import set_recompute
from bert_keras.training import distribute
from bert_keras.training.backup import fit_from_backup, prune_logs
from bert_keras.training.callbacks import (
    EvaluateAndKeepBest,
    EvaluateAtStep,
    StopAfterSteps,
    TensorBoard,
    TimeBudget,
)
from bert_keras.training.evaluation_summaries import EvaluationSummaries
from bert_keras.training.finetuning import fitting_batch_size, schedule
from bert_keras.training.optimization import create_optimizer
from bert_keras.training.progress import fit_progress

# Optimizer steps between backups: on a small model about one step's time in 1,000 (docs/finetuning.md).
BACKUP_STEPS = 500


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
    report=None,
    saved_model=None,
    batch_size=32,
    epochs=3,
    learning_rate=2e-5,
    warmup_proportion=0.1,
    weight_decay=0.01,
    bias_correction=False,
    reinit_layers=0,
    max_train_steps=None,
    max_train_minutes=None,
    max_seq_length=None,
    backup_steps=BACKUP_STEPS,
    loss="auto",
    preprocessed=False,
    strategy=None,
    jit_compile="auto",
    recompute=False,
    interim_evaluation=None,
    verbose="auto",
):
    """Fine-tunes `model` (a task built in `strategy`'s scope) on `train_batches` of `num_examples`: raw samples
    batched at `batch_size` (the task's `preprocessed_dataset` packs them), or packed ones with `preprocessed=True`;
    a dataset, or a function that builds it anew (which a run resumed inside an epoch needs to see the same data:
    every iterator of one dataset shuffles anew). `evaluate(model) -> {metric: value}` runs after every epoch (and
    `on_best(metrics)` when an epoch is the best so far; `report()`, its `EvaluationReport`, into the logs and
    `evaluations/`); the weights of the best `main_metric` are kept and written, without optimizer state, as
    `output_dir/best.keras`, every epoch's metrics as `eval_results.json` and the curves under `logs/` (on the
    chief). `epochs` may be fractional; `max_train_steps` and `max_train_minutes` stop earlier. Each global batch is
    split into per-replica batches (an epoch's last, smaller batch is dropped; a set smaller than one batch is one
    smaller batch), padded to `max_seq_length` where the strategy needs static shapes (TPUs). `loss` and
    `jit_compile` go to the task's `compile` ("auto": XLA on GPUs and TPUs, not on CPU, where it ran slower, nor
    with windows); `recompute`: `BertEncoder(recompute=True)`. `bias_correction` (Adam's) and `reinit_layers` (the
    encoder's top layers and pooler drawn anew) are the stable recipe of Mosbach et al. and Zhang et al. (2021) for
    small data sets. `saved_model` is what `best.keras` holds (default `model`; a `BertDistiller` keeps its
    student). `interim_evaluation` (fraction, report): `report(metrics, main_metric, step)` after that fraction of
    the steps, which may raise to stop the run (`recipes.search` discarding it). Backed up to
    `output_dir/checkpoints/` every `backup_steps` steps, at epoch ends and on SIGTERM
    (`training.backup.StepBackup`), a run called again with the same arguments resumes there (`train_batches` must
    be deterministic) and ends as an uninterrupted run would. Returns a `FinetuningRun` (`history`: this call's
    epochs)."""
    strategy = strategy or tf.distribute.get_strategy()
    fitted_batch = fitting_batch_size(num_examples, batch_size, strategy.num_replicas_in_sync)
    build = _builder(train_batches, batch_size, fitted_batch)
    steps_per_epoch, epochs, planned = schedule(num_examples, fitted_batch, epochs, max_train_steps)
    # Epochs are of equal length, so the plan may run a few steps past max_train_steps: stop at it.
    total = min(planned, max_train_steps or planned)
    recipe = dict(learning_rate=learning_rate, warmup_proportion=warmup_proportion, weight_decay=weight_decay)
    recipe.update(bias_correction=bias_correction, reinit_layers=reinit_layers)
    _print_plan(total, planned, epochs, steps_per_epoch, fitted_batch, learning_rate, warmup_proportion)
    _compile(model, saved_model or model, strategy, total, loss, jit_compile, recompute, **recipe)
    keeper, budget = EvaluateAndKeepBest(evaluate, main_metric, on_best), TimeBudget(max_train_minutes)
    plan = dict(examples=num_examples, batch_size=fitted_batch, steps=total, steps_per_epoch=steps_per_epoch, **recipe)
    with (
        _backup(output_dir, strategy, backup_steps, plan, keeper=keeper, time=budget) as backup,
        distribute.chief_path(output_dir, strategy) as output_dir,
    ):
        output_dir.mkdir(parents=True, exist_ok=True)
        stops = [budget, *_stops(total, planned, steps_per_epoch, interim_evaluation, evaluate, main_metric)]
        batches = functools.partial(
            _replica_batches, model, build, preprocessed, strategy, fitted_batch, max_seq_length
        )
        evaluation = evaluation_callbacks(keeper, report, output_dir)
        history = _fit(model, batches, backup, [*stops, *evaluation], plan, epochs, output_dir, strategy, verbose)
        evaluations = _write_run(output_dir, keeper, budget, model, saved_model)
        backup.remove()
    best = keeper.best
    print(f"best {main_metric}: {best[main_metric]:.4f} (epoch {best['epoch']}); model in {output_dir / 'best.keras'}")
    return FinetuningRun(model, history, best, evaluations)


def evaluation_callbacks(keeper, report, output_dir):
    """`keeper` (the callback that evaluates, an `EvaluateAndKeepBest`) and, with `report`
    (the last evaluation's `EvaluationReport`), the `EvaluationSummaries` it writes after
    each evaluation into `output_dir`."""
    return [keeper, *([EvaluationSummaries(report, output_dir)] if report else [])]


def _compile(model, trained, strategy, steps, loss, jit_compile, recompute, bias_correction, reinit_layers, **schedule):
    """`model` (its encoders' `recompute` set) compiled in `strategy`'s scope with the run's
    optimiser (`schedule`: learning rate, warm-up, decay) over `steps`, after the top
    `reinit_layers` of `trained`'s encoder are drawn anew; says which of the stable recipe's
    changes the run makes."""
    set_recompute(model, recompute)
    warmup = int(schedule["warmup_proportion"] * steps)
    with strategy.scope():
        if reinit_layers:
            trained.encoder.reinitialize_top_layers(reinit_layers)
        optimizer = create_optimizer(
            schedule["learning_rate"],
            steps,
            warmup,
            weight_decay=schedule["weight_decay"],
            bias_correction=bias_correction,
        )
        model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)
    changes = []
    if bias_correction:
        changes.append("AdamW with bias correction")
    if reinit_layers:
        changes.append(f"top {reinit_layers} layer(s) and pooler re-initialised")
    if changes:
        print(", ".join(changes))


def _stops(total, planned, steps_per_epoch, interim_evaluation, evaluate, main_metric):
    """The callbacks that end a run of `total` steps early: at `total` when the plan runs past
    it, and `interim_evaluation`'s (fraction, report), whose report may raise."""
    stops = [StopAfterSteps(total, steps_per_epoch)] if total < planned else []
    if interim_evaluation is not None:
        fraction, report = interim_evaluation
        step = max(1, round(fraction * total))
        stops.append(EvaluateAtStep(step, evaluate, lambda metrics, at: report(metrics, main_metric, at)))
    return stops


def _write_run(output_dir, keeper, budget, model, saved_model):
    """`eval_results.json` (every epoch's metrics, then the training seconds, steps and main
    metric) and `best.keras`: the best weights, the model alone (no optimizer state).
    Returns the evaluations."""
    steps = int(model.optimizer.iterations.numpy())
    summary = {"train_seconds": round(budget.seconds, 1), "steps": steps, "main_metric": keeper.main_metric}
    evaluations = [*keeper.history, summary]
    (output_dir / "eval_results.json").write_text(json.dumps(evaluations, indent=2) + "\n")
    model.set_weights(keeper.best_weights)
    with_dtype(saved_model or model).save(output_dir / "best.keras")
    return evaluations


def _backup(output_dir, strategy, backup_steps, plan, **states):
    """The run's `StepBackup` in `output_dir/checkpoints` (a `with` block: `distribute.backup_and_restore`)."""
    on_sigterm = distribute.input_pipelines(strategy) == 1
    return distribute.backup_and_restore(
        Path(output_dir) / "checkpoints",
        strategy,
        save_freq=backup_steps,
        states=states,
        plan=plan,
        on_sigterm=on_sigterm,
    )


def _fit(model, batches, backup, callbacks, plan, epochs, output_dir, strategy, verbose):
    """`fit_from_backup` after `backup` restored the run (the logs written after that
    backup dropped), with `callbacks`, progress and TensorBoard logs. Returns the `History`."""
    steps, steps_per_epoch = plan["steps"], plan["steps_per_epoch"]
    with strategy.scope():
        done = backup.restore(model)
    if done:
        print(f"resuming after step {done} of {steps}")
    keeper = backup.states["keeper"]
    prune_logs(output_dir / "logs", done, len(keeper.history))
    verbose, progress = fit_progress(verbose)
    return fit_from_backup(
        model,
        backup,
        batches,
        steps=steps,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=lambda: [
            *progress,
            *callbacks,
            TensorBoard(str(output_dir / "logs"), update_freq=max(1, steps_per_epoch // 20)),
        ],
        verbose=verbose,
    )


def _builder(train_batches, batch_size, fitted_batch):
    """A function that builds the training batches (`train_batches` may be one), the set's
    one batch cut to `fitted_batch` when the set is smaller than `batch_size`."""

    def build():
        batches = train_batches() if callable(train_batches) else train_batches
        return batches if fitted_batch == batch_size else batches.unbatch().batch(fitted_batch)

    return build


def _replica_batches(model, train_batches, preprocessed, strategy, batch_size, max_seq_length, skip=0):
    """The training batches (`train_batches()`) after the first `skip` (those a resumed
    run has trained: skipped before they are packed), packed unless `preprocessed`,
    repeated and split into per-replica batches (padded to `max_seq_length` where the
    strategy needs static shapes)."""
    full = train_batches().repeat().filter(lambda *batch: tf.shape(tf.nest.flatten(batch)[0])[0] == batch_size)
    full = full.skip(skip)
    batches = full if preprocessed else model.preprocessed_dataset(full)
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
