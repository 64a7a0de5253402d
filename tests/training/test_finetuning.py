"""The reusable fine-tuning pieces: batches, schedule and the keep-best callback."""

import math

import keras
import numpy as np
import pytest

from bert_keras.training.callbacks import EvaluateAndKeepBest
from bert_keras.training.finetuning import length_grouped_batches, schedule


def test_length_grouped_batches_cover_every_example_once_with_little_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 200, size=1000)
    ids = np.arange(1000)
    batches = list(length_grouped_batches(ids, lengths, batch_size=10, shuffle=True, seed=1, group=20))
    seen = np.concatenate([batch.numpy() for batch in batches])
    assert sorted(seen) == list(ids)
    padded = sum(len(batch) * lengths[batch.numpy()].max() for batch in batches)
    random_order = rng.permutation(ids).reshape(-1, 10)
    padded_random = sum(10 * lengths[batch].max() for batch in random_order)
    assert padded < 0.7 * padded_random, (padded, padded_random)
    again = np.concatenate(
        [batch.numpy() for batch in length_grouped_batches(ids, lengths, batch_size=10, shuffle=True, seed=1, group=20)]
    )
    np.testing.assert_array_equal(again, seen)  # a seed fixes the order


def test_length_grouped_batches_keep_order_without_shuffle():
    batches = list(length_grouped_batches(np.arange(7), [5, 1, 4, 2, 3, 9, 8], batch_size=3, shuffle=False, seed=0))
    assert [batch.numpy().tolist() for batch in batches] == [[0, 1, 2], [3, 4, 5], [6]]


@pytest.mark.parametrize(
    "examples, batch, epochs, cap",
    [(100, 32, 3, None), (100, 32, 2.5, None), (1000, 8, 3, 50), (5, 32, 1, None), (640, 32, 0.01, None)],
)
def test_schedule(examples, batch, epochs, cap):
    steps_per_epoch, num_epochs, total = schedule(examples, batch, epochs, cap)
    wanted = max(1, round(epochs * math.ceil(examples / batch)))
    if cap:
        wanted = min(wanted, cap)
    assert total == steps_per_epoch * num_epochs
    assert wanted <= total < wanted + num_epochs  # equal epochs: at most one step more each
    assert steps_per_epoch <= max(1, math.ceil(examples / batch))


def test_evaluate_and_keep_best_keeps_the_best_epochs_weights(tmp_path):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    scores = iter([0.5, 0.9, 0.7])
    kernels = []

    def evaluate(model):
        kernels.append(model.layers[0].kernel.numpy().copy())
        return {"accuracy": next(scores)}

    best_epochs = []
    keeper = EvaluateAndKeepBest(evaluate, "accuracy", on_best=best_epochs.append)
    x, y = np.ones((4, 2), "float32"), np.full((4, 1), 3.0, "float32")
    history = model.fit(x, y, epochs=3, verbose=0, callbacks=[keeper])
    assert keeper.best == {"epoch": 2, "accuracy": 0.9}
    # The hook runs once per new best epoch, with its metrics (SQuAD/CoNLL write predictions then).
    assert best_epochs == [{"epoch": 1, "accuracy": 0.5}, {"epoch": 2, "accuracy": 0.9}]
    assert [row["epoch"] for row in keeper.history] == [1, 2, 3]
    assert history.history["val_accuracy"] == [0.5, 0.9, 0.7]
    model.set_weights(keeper.best_weights)
    np.testing.assert_array_equal(model.layers[0].kernel.numpy(), kernels[1])
