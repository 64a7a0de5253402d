"""The CoNLL-2003 examples' features for the feature-based run: a `TaggingCache` of the
training (with labels) and dev (with word positions) examples, and its file beside the
run's backups, stored whole or not at all and keyed by a `run_identity` (the layers, the
encoder's weights, the examples' words and labels), so a resumed run reuses it and an
edited data set or another encoder never does."""

import dataclasses
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from bert_keras.datasets.conll import training_examples
from bert_keras.run_identity import check, job_identity, json_digest
from bert_keras.tasks.feature_cache import FeatureCache, cache_features


@dataclasses.dataclass
class TaggingCache:
    """A `ConllData`'s training examples (with labels) and dev examples (with word positions)."""

    train: FeatureCache
    dev: FeatureCache

    def select(self, hidden_states):
        return TaggingCache(self.train.select(hidden_states), self.dev.select(hidden_states))


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
    """What a stored cache must match (a `run_identity`): the model's hidden states, its
    encoder's weights, and the training and dev examples, words and labels."""
    examples = {
        "train_examples": json_digest(training_examples(data.train, data.train_contexts)),
        "dev_examples": json_digest(training_examples(data.dev, data.dev_contexts)),
    }
    return job_identity({"hidden_states": list(model.hidden_states), **examples}, {"encoder": model.encoder})


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
        splits = [_split(arrays, name, stored_key["settings"]["hidden_states"]) for name in ("train", "dev")]
    except (OSError, ValueError, EOFError, KeyError, TypeError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"{path}: not a whole feature cache ({type(error).__name__}: {error}); "
            "delete it (or pass --overwrite) to compute the features anew"
        ) from None
    check(stored_key, key, f"{path} (a feature cache)", "delete it (or pass --overwrite) to compute the features anew")
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
