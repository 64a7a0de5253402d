"""The paper's feature-based NER run: the frozen encoder's features computed once, then
the task model trained on them.

`cache_tagging_features` runs the encoder over the training and dev examples a single
time (kept for a resumed run: `stored_tagging_features`) and keeps each example's real
tokens' features (float16, `[tokens, n, H]`) with its labels or word start positions;
`train_feature_tagger` trains a `BertFeatureTagger`'s BiLSTM and tag layer on that cache
for a number of epochs, scores the dev set with conlleval after each one from the cache
too, and saves the whole tagger (encoder included) with the best epoch's weights as
`best.keras`; killed, it resumes from its backups. One cache of several layers serves every choice of
them (`FeatureCache.select`).
"""

import dataclasses
import hashlib
import json
import math
import os
import time
import zipfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bert_keras.datasets.conll import LABELS, sentence_tags, training_examples
from bert_keras.models.dtype import with_dtype
from bert_keras.recipes.finetuning import BACKUP_STEPS, FinetuningRun
from bert_keras.tasks.token_classifier import IGNORE_LABEL
from bert_keras.training.backup import StepBackup, fit_from_backup
from bert_keras.training.callbacks import EvaluateAndKeepBest, StopAfterSteps
from bert_keras.training.progress import fit_progress, progress_bar


@dataclasses.dataclass
class FeatureCache:
    """Per example: `features` float16 `[tokens, n, H]` of its packed tokens ([CLS] to
    [SEP]) for the encoder's `hidden_states` (0 the embeddings, i layer i), and `targets`:
    int32 label per token (IGNORE_LABEL off first pieces) or each word's first-piece
    position (-1: none)."""

    hidden_states: list
    features: list
    targets: list

    def select(self, hidden_states):
        """The cache of these `hidden_states` only (a subset of its own), in their order."""
        missing = [index for index in hidden_states if index not in self.hidden_states]
        if missing:
            raise ValueError(f"the feature cache holds hidden states {self.hidden_states}, not {missing}")
        picks = [self.hidden_states.index(index) for index in hidden_states]
        step = picks[1] - picks[0] if len(picks) > 1 else 1
        if step in (1, -1) and picks == list(range(picks[0], picks[-1] + step, step)):
            picks = slice(picks[0], None if picks[-1] + step < 0 else picks[-1] + step, step)  # a view, no copy
        return FeatureCache(list(hidden_states), [f[:, picks] for f in self.features], self.targets)


@dataclasses.dataclass
class TaggingCache:
    """A `ConllData`'s training examples (with labels) and dev examples (with word positions)."""

    train: FeatureCache
    dev: FeatureCache

    def select(self, hidden_states):
        return TaggingCache(self.train.select(hidden_states), self.dev.select(hidden_states))


def cache_features(model, words, labels=None, hidden_states=None, batch_size=64, verbose=1):
    """`model.features` (a `BertFeatureTagger`'s) of every example of `words` (lists of
    words), run once in batches of similar lengths: a `FeatureCache` whose targets are
    the labels per token of `labels` (word label ids), else each word's first-piece position."""
    hidden_states = model.hidden_states if hidden_states is None else list(hidden_states)
    features = tf.function(lambda packed: model.features(packed, hidden_states), reduce_retracing=True)
    order = np.argsort([len(w) for w in words], kind="stable")
    cached, targets = [None] * len(words), [None] * len(words)
    progress = progress_bar(len(words), "example", verbose)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = tf.ragged.constant([words[i] for i in rows], dtype=tf.string, row_splits_dtype=tf.int64)
        if labels is None:
            packed, positions = model.word_start_positions(batch)
            row_targets = [np.asarray(p, "int32") for p in positions.to_list()]
        else:
            row_labels = tf.ragged.constant([labels[i] for i in rows], dtype=tf.int32, row_splits_dtype=tf.int64)
            packed, token_labels = model.preprocess_samples(batch, row_labels)
            row_targets = list(token_labels.numpy().astype("int32"))
        values = features(packed).numpy().astype("float16")
        lengths = packed["input_mask"].numpy().sum(axis=1)
        for row, index in enumerate(rows):
            cached[index] = values[row, : lengths[row]]
            targets[index] = row_targets[row] if labels is None else row_targets[row][: lengths[row]]
        progress.add(len(rows))
    return FeatureCache(hidden_states, cached, targets)


def cache_tagging_features(model, data, hidden_states=None, batch_size=64, verbose=1):
    """The `TaggingCache` of a prepared `ConllData` (sentences, or their document contexts)."""
    train_words, train_labels = training_examples(data.train, data.train_contexts)
    dev_words = training_examples(data.dev, data.dev_contexts)[0]
    return TaggingCache(
        cache_features(model, train_words, train_labels, hidden_states, batch_size, verbose),
        cache_features(model, dev_words, None, hidden_states, batch_size, verbose),
    )


# The stored feature cache, beside the run's backups (`output_dir/checkpoints/`) until the run ends.
CACHE = Path("checkpoints") / "features.cache"


def cache_key(model, data):
    """What a stored cache must match: the model's hidden states, and a digest of its encoder's
    weights and of the examples."""
    digest = hashlib.sha256()
    for weight in model.encoder.get_weights():
        digest.update(np.ascontiguousarray(weight).tobytes())
    digest.update(json.dumps([training_examples(data.train, data.train_contexts), data.dev_size]).encode())
    return {"hidden_states": list(model.hidden_states), "digest": digest.hexdigest()}


def stored_tagging_features(model, data, path, batch_size=64, verbose=1):
    """The `TaggingCache` stored in `path` by a run of this model on these examples, or
    computed (`cache_tagging_features`) and stored there, whole or not at all (a kill
    while it is written leaves none). A file that is not such a cache is an error naming it."""
    path, key = Path(path), cache_key(model, data)
    if path.exists():
        return _read_cache(path, key)
    cache = cache_tagging_features(model, data, batch_size=batch_size, verbose=verbose)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {"key": np.array(json.dumps(key))}
    for name, split in (("train", cache.train), ("dev", cache.dev)):
        arrays[f"{name}_features"] = np.concatenate(split.features)
        arrays[f"{name}_lengths"] = np.array([len(f) for f in split.features])
        arrays[f"{name}_targets"] = np.concatenate(split.targets).astype("int32")
        arrays[f"{name}_target_lengths"] = np.array([len(t) for t in split.targets])
    written = path.with_name(path.name + ".tmp")
    with open(written, "wb") as file:
        np.savez(file, **arrays)
    os.replace(written, path)
    return cache


def _read_cache(path, key):
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
        stored_key = json.loads(str(arrays["key"]))
        splits = [_split(arrays, name, stored_key["hidden_states"]) for name in ("train", "dev")]
    except (OSError, ValueError, EOFError, KeyError, TypeError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"{path}: not a whole feature cache ({type(error).__name__}: {error}); "
            "delete it (or pass --overwrite) to compute the features anew"
        ) from None
    if stored_key != key:
        what = "layers" if stored_key.get("hidden_states") != key["hidden_states"] else "encoder weights or examples"
        raise ValueError(
            f"{path}: the feature cache of other {what} (hidden states {stored_key.get('hidden_states')}, "
            f"this run's {key['hidden_states']}); delete it (or pass --overwrite) to compute the features anew"
        )
    return TaggingCache(*splits)


def _split(arrays, name, hidden_states):
    lengths, target_lengths = arrays[f"{name}_lengths"], arrays[f"{name}_target_lengths"]
    features, targets = arrays[f"{name}_features"], arrays[f"{name}_targets"]
    if lengths.sum() != len(features) or target_lengths.sum() != len(targets) or len(lengths) != len(target_lengths):
        raise ValueError(f"the {name} examples' lengths do not add up to their arrays")
    return FeatureCache(
        hidden_states,
        np.split(features, np.cumsum(lengths)[:-1]),
        [t.astype("int32") for t in np.split(targets, np.cumsum(target_lengths)[:-1])],
    )


class CachedBatches(keras.utils.PyDataset):
    """Training batches of a `FeatureCache`: every epoch shuffled by `seed`, then chunks of
    50 batches sorted by length (little padding), padded as the packer pads."""

    def __init__(self, cache, batch_size, seed=0, shuffle=True, epoch=0):
        super().__init__()
        self.cache, self.batch_size, self.seed, self.shuffle = cache, batch_size, seed, shuffle
        self.epoch = epoch
        self.batches = self._batches()

    def _batches(self):
        lengths = np.array([len(f) for f in self.cache.features])
        order = np.arange(len(lengths))
        if not self.shuffle:
            return [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        random = np.random.default_rng([self.seed, self.epoch])
        order = random.permutation(order)
        chunk = 50 * self.batch_size
        order = np.concatenate(
            [c[np.argsort(lengths[c], kind="stable")] for c in np.split(order, range(chunk, len(order), chunk))]
        )
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        return [batches[i] for i in random.permutation(len(batches))]

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        rows = self.batches[index]
        inputs = self.inputs(index)
        labels = np.full(inputs["input_mask"].shape, IGNORE_LABEL, "int32")
        for row, i in enumerate(rows):
            labels[row, : len(self.cache.targets[i])] = self.cache.targets[i]
        return inputs, labels

    def inputs(self, index):
        """Batch `index`'s `{"features", "input_mask"}`, padded to its longest example."""
        rows = self.batches[index]
        width = max(len(self.cache.features[i]) for i in rows)
        features = np.zeros((len(rows), width, *self.cache.features[rows[0]].shape[1:]), "float32")
        mask = np.zeros((len(rows), width), "int32")
        for row, i in enumerate(rows):
            length = len(self.cache.features[i])
            features[row, :length], mask[row, :length] = self.cache.features[i], 1
        return {"features": features, "input_mask": mask}

    def on_epoch_end(self):
        if self.shuffle:
            self.epoch += 1
            self.batches = self._batches()


def batches_after(cache, batch_size, seed, steps_per_epoch, skip=0):
    """The training batches of `cache` (`CachedBatches`, the first `steps_per_epoch` of
    each epoch's order) after the first `skip`, endlessly: those a resumed run trains."""
    step = skip
    while True:
        epoch, index = divmod(step, steps_per_epoch)
        if index == 0 or step == skip:
            batches = CachedBatches(cache, batch_size, seed, epoch=epoch)
        yield batches[index]
        step += 1


class CachedFeatureModel(keras.Model):
    """A `BertFeatureTagger`'s trained part on cached features: `{"features", "input_mask"}` -> logits."""

    def __init__(self, tagger, **kwargs):
        super().__init__(**kwargs)
        self.tagger = tagger

    def call(self, inputs, training=None):
        return self.tagger.tag_logits(inputs["features"], inputs["input_mask"], training=training)


def cached_word_tags(trainer, cache, batch_size=64):
    """Tag names per word of the dev cache's examples: the argmax at each word's first piece."""
    batches = CachedBatches(cache, batch_size, shuffle=False)
    tags = [None] * len(cache.features)
    predict = tf.function(lambda x: trainer(x, training=False), reduce_retracing=True)
    for index in range(len(batches)):
        labels = np.argmax(predict(batches.inputs(index)).numpy(), axis=-1)
        for row, i in enumerate(batches.batches[index]):
            tags[i] = [LABELS[labels[row, p]] if p >= 0 else "O" for p in cache.targets[i]]
    return tags


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
    with `eval_results.json` and the best epoch's `predictions.txt`. Backed up every
    `backup_steps` steps and at epoch ends (`StepBackup`), a run called again resumes and
    ends as an uninterrupted one would. Returns a `FinetuningRun`."""
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
        lambda trained: data.score(
            sentence_tags(cached_word_tags(trained, cache.dev, eval_batch_size), data.dev_contexts)
        ),
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
    history = _fit(trainer, backup, cache.train, plan, verbose)
    keeper.history.append({"cache_seconds": cache_seconds, "train_seconds": round(time.perf_counter() - start, 1)})
    (output_dir / "eval_results.json").write_text(json.dumps(keeper.history, indent=2) + "\n")
    trainer.set_weights(keeper.best_weights)
    with_dtype(model).save(output_dir / "best.keras")
    (output_dir / CACHE).unlink(missing_ok=True)
    backup.remove()
    print(f"best f1: {keeper.best['f1']:.4f} (epoch {keeper.best['epoch']}); model in {output_dir / 'best.keras'}")
    return FinetuningRun(model, history, keeper.best, keeper.history)


def _fit(trainer, backup, cache, plan, verbose):
    """`fit_from_backup` of `trainer` on `batches_after` the steps `backup` restored."""
    steps, epochs, batch_size, seed = plan["steps_per_epoch"], plan["epochs"], plan["batch_size"], plan["seed"]
    total = plan["steps"]
    trainer(CachedBatches(cache, batch_size, seed).inputs(0))  # built, for the backup to load into
    done = backup.restore(trainer)
    if done:
        print(f"resuming after step {done} of {total}")
    verbose, progress = fit_progress(verbose)
    stop = [StopAfterSteps(total, steps)] if total < steps * epochs else []
    return fit_from_backup(
        trainer,
        backup,
        lambda skip: batches_after(cache, batch_size, seed, steps, skip),
        steps=total,
        epochs=epochs,
        steps_per_epoch=steps,
        callbacks=lambda: [*progress, *stop, backup.states["keeper"]],
        shuffle=False,  # the batches shuffle themselves
        verbose=verbose,
    )
