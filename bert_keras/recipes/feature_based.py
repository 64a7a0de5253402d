"""The paper's feature-based NER run: `train_feature_tagger` trains a `BertFeatureTagger`'s
BiLSTM and tag layer on the frozen encoder's features, computed once
(`recipes/tagging_features.py`: kept beside the backups for a resumed run), for a number
of epochs, scores the dev set with conlleval after each one from the cache too (reported
as a fine-tuning run's evaluations are: per-type scores and worst errors in TensorBoard and
`evaluations/`), and saves the whole tagger (encoder included) with the best epoch's
weights as `best.keras`; killed, it resumes from its backups."""

import json
import math
import time
from pathlib import Path

import keras
import tensorflow as tf

from bert_keras.datasets.conll import sentence_tags, word_tags
from bert_keras.models.dtype import with_dtype
from bert_keras.recipes.finetuning import BACKUP_STEPS, FinetuningRun, evaluation_callbacks
from bert_keras.recipes.tagging_features import CACHE, stored_tagging_features
from bert_keras.tasks.feature_batches import CachedBatches, batches_after
from bert_keras.tasks.feature_tagger import CachedFeatureModel
from bert_keras.tasks.token_classifier import IGNORE_LABEL
from bert_keras.training.backup import StepBackup, fit_from_backup, prune_logs
from bert_keras.training.callbacks import EvaluateAndKeepBest, StopAfterSteps
from bert_keras.training.progress import fit_progress


def cached_word_tags(trainer, cache, batch_size=64):
    """(tags, their probabilities) per word of the dev cache's examples (`word_tags`)."""
    batches = CachedBatches(cache, batch_size, shuffle=False)
    tags, confidences = [None] * len(cache.features), [None] * len(cache.features)
    predict = tf.function(
        lambda x: tf.nn.softmax(tf.cast(trainer(x, training=False), tf.float32)), reduce_retracing=True
    )
    for index in range(len(batches)):
        probabilities = predict(batches.inputs(index)).numpy()
        for row, i in enumerate(batches.batches[index]):
            tags[i], confidences[i] = word_tags(probabilities[row], cache.targets[i])
    return tags, confidences


def cached_score(trainer, data, cache, batch_size=64):
    """`data.score` (a `ConllData`'s conlleval) of the tags `trainer` gives the dev cache's examples."""
    tags, confidences = cached_word_tags(trainer, cache, batch_size)
    return data.score(sentence_tags(tags, data.dev_contexts), sentence_tags(confidences, data.dev_contexts))


def train_feature_tagger(
    model,
    data,
    *,
    output_dir,
    cache=None,
    epochs=5,
    max_train_steps=None,
    batch_size=32,
    learning_rate=1e-3,
    eval_batch_size=64,
    seed=0,
    backup_steps=BACKUP_STEPS,
    verbose="auto",
):
    """Trains the BiLSTM and tag layer of `model` (a `BertFeatureTagger`) on a prepared `ConllData`: the
    features computed once (`stored_tagging_features` in `output_dir`, unless `cache`, of at least the
    model's layers, is given), then `epochs` of Adam at `learning_rate` (gradients clipped
    to norm 1; `max_train_steps` steps in all if fewer, the last epoch cut short) with conlleval
    on the dev set after each. The best epoch's weights stay in `model`, saved whole as `output_dir/best.keras`,
    with `eval_results.json`, the best epoch's `predictions.txt` and each epoch's report (`logs/validation`,
    `evaluations/`). Backed up every `backup_steps` steps and at epoch ends (`StepBackup`), a run called again
    resumes and ends as an uninterrupted one would. Returns a `FinetuningRun`."""
    output_dir = Path(output_dir)
    start = time.perf_counter()
    if cache is None:
        cache = stored_tagging_features(model, data, output_dir / CACHE, eval_batch_size)
    cache = cache.select(model.hidden_states)
    cache_seconds = round(time.perf_counter() - start, 1)
    output_dir.mkdir(parents=True, exist_ok=True)
    trainer = CachedFeatureModel(model)
    trainer.compile(
        optimizer=keras.optimizers.Adam(learning_rate, global_clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE_LABEL),
    )
    keeper = EvaluateAndKeepBest(
        lambda trained: cached_score(trained, data, cache.dev, eval_batch_size),
        "f1",
        lambda metrics: data.write_predictions(output_dir),
    )
    start = time.perf_counter()
    count = len(CachedBatches(cache.train, batch_size, seed))
    steps = min(count, max_train_steps or count)
    total = min(epochs * steps, max_train_steps or epochs * steps)
    plan = dict(epochs=math.ceil(total / steps), steps_per_epoch=steps, steps=total, batch_size=batch_size)
    plan.update(learning_rate=learning_rate, seed=seed)
    backup = StepBackup(output_dir / CACHE.parent, save_freq=backup_steps, states={"keeper": keeper}, plan=plan)
    history = _fit(trainer, backup, cache.train, plan, data, output_dir, verbose)
    seconds = round(time.perf_counter() - start, 1)
    keeper.history.append({"cache_seconds": cache_seconds, "train_seconds": seconds, "steps": total})
    keeper.history[-1]["main_metric"] = "f1"
    (output_dir / "eval_results.json").write_text(json.dumps(keeper.history, indent=2) + "\n")
    trainer.set_weights(keeper.best_weights)
    with_dtype(model).save(output_dir / "best.keras")
    (output_dir / CACHE).unlink(missing_ok=True)
    backup.remove()
    print(f"best f1: {keeper.best['f1']:.4f} (epoch {keeper.best['epoch']}); model in {output_dir / 'best.keras'}")
    return FinetuningRun(model, history, keeper.best, keeper.history)


def _fit(trainer, backup, cache, plan, data, output_dir, verbose):
    """`fit_from_backup` of `trainer` on `batches_after` the steps `backup` restored (the
    reports written after that backup dropped), each evaluation's report of `data` written
    into `output_dir` (`evaluation_callbacks`)."""
    steps, epochs, batch_size, seed = plan["steps_per_epoch"], plan["epochs"], plan["batch_size"], plan["seed"]
    total = plan["steps"]
    trainer(CachedBatches(cache, batch_size, seed).inputs(0))  # built, for the backup to load into
    done = backup.restore(trainer)
    if done:
        print(f"resuming after step {done} of {total}")
    prune_logs(output_dir / "logs", done, len(backup.states["keeper"].history))  # the reports after the backup
    verbose, progress = fit_progress(verbose)
    stop = [StopAfterSteps(total, steps)] if total < steps * epochs else []
    return fit_from_backup(
        trainer,
        backup,
        lambda skip: batches_after(cache, batch_size, seed, steps, skip),
        steps=total,
        epochs=epochs,
        steps_per_epoch=steps,
        callbacks=lambda: [*progress, *stop, *evaluation_callbacks(backup.states["keeper"], data.report, output_dir)],
        shuffle=False,  # the batches shuffle themselves
        verbose=verbose,
    )
