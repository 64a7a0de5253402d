"""A frozen encoder's features, computed once: the paper's feature-based approach runs
the encoder a single time over the examples and trains the task model on the cache for
many epochs. One cache of several layers serves every choice of them (`FeatureCache.select`)."""

import dataclasses

import numpy as np
import tensorflow as tf

from bert_keras.training.progress import progress_bar


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
