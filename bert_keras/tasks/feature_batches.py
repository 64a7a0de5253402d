"""Training batches of a `FeatureCache`, as a `keras.utils.PyDataset`: shuffled by the
seed each epoch, length-sorted in chunks, and resumable at any step (`batches_after`)."""

import keras
import numpy as np

from bert_keras.tasks.token_classifier import IGNORE_LABEL


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
