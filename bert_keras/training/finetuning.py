"""The data pieces of the original fine-tuning recipe that any `model.fit` script can reuse.

Length-grouped batches of raw text (dynamic padding wastes little when a batch holds
similar lengths), the step schedule behind `--epochs`/`--max-train-steps`, and the
batch size a small training set can fill. The callbacks are `training.callbacks`; the
run that wires them together is `bert_keras.recipes.finetune`.
"""

import math
import warnings

import numpy as np
import tensorflow as tf


def length_grouped_batches(data, lengths, batch_size, shuffle, seed, group=50):
    """A batched `tf.data.Dataset` of `data` (a structure of equal-length arrays).

    Training: shuffled every epoch, then chunks of `group` batches are sorted by
    `lengths` and cut into batches, whose order is shuffled again, so each batch
    holds similar lengths (little padding) yet batches stay random."""
    dataset = tf.data.Dataset.from_tensor_slices((data, np.asarray(lengths, "int32")))
    if shuffle:
        dataset = dataset.shuffle(len(lengths), seed=seed, reshuffle_each_iteration=True)
        dataset = dataset.batch(batch_size * group).map(_sort_chunk).unbatch()
    dataset = dataset.batch(batch_size).map(lambda element, length: element)
    if shuffle:
        dataset = dataset.shuffle(group, seed=seed, reshuffle_each_iteration=True)
    return dataset


def _sort_chunk(element, lengths):
    order = tf.argsort(lengths)
    return tf.nest.map_structure(lambda t: tf.gather(t, order), element), tf.gather(lengths, order)


def schedule(num_examples, batch_size, epochs, max_train_steps=None):
    """(steps_per_epoch, epochs, total steps) for `epochs` (may be fractional) over
    `num_examples`, capped at `max_train_steps`; epochs are of equal length (evaluation
    after each), so the last may run a few steps more."""
    steps_per_epoch = max(1, math.ceil(num_examples / batch_size))
    total = max(1, int(round(epochs * steps_per_epoch)))
    if max_train_steps:
        total = min(total, max_train_steps)
    epochs = math.ceil(total / steps_per_epoch)
    steps_per_epoch = math.ceil(total / epochs)
    return steps_per_epoch, epochs, steps_per_epoch * epochs


def fitting_batch_size(num_examples, batch_size, replicas=1):
    """The global batch size for a training set of `num_examples`: `batch_size`, or,
    when the set is smaller than one batch, the largest multiple of `replicas` it fills
    (with a warning). Training drops an epoch's incomplete last batch (replicas get equal
    shares), so a set smaller than the batch would give no batch at all, and a repeated
    empty dataset makes `fit` wait forever."""
    if num_examples >= batch_size:
        return batch_size
    shrunk = num_examples // replicas * replicas
    if not shrunk:
        raise ValueError(
            f"{num_examples} training example(s) cannot fill one batch for the {replicas} replicas "
            "in sync (each needs at least one example)"
        )
    warnings.warn(
        f"{num_examples} training example(s) are fewer than the batch size {batch_size}: "
        f"training with batches of {shrunk}",
        stacklevel=2,
    )
    return shrunk
