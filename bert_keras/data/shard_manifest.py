"""The manifest of a sharded pre-training data set: `OUTPUT.manifest.json`.

It records the settings (recipe, seed, vocabulary hash, inputs, shard plan) and each
finished shard's counts; it is updated as shards finish, so a rerun of the same command
skips them, and it refuses to mix in shards made with other settings.
"""

import json
import os

import tensorflow as tf

from bert_keras.data.tfrecords import MANIFEST_SUFFIX

MANIFEST_VERSION = 2


def manifest_path(output):
    return f"{output}{MANIFEST_SUFFIX}"


def write_manifest(output, settings, entries, complete):
    """Writes the manifest atomically: settings, finished shards in index order, totals."""
    entries = sorted(entries, key=lambda entry: entry["index"])
    manifest = {
        **settings,
        "status": "complete" if complete else "incomplete",
        "shards": entries,
        "documents": sum(entry["documents"] for entry in entries),
        "instances": sum(entry["instances"] for entry in entries),
        "empty_shards": [entry["output"] for entry in entries if not entry["instances"]],
    }
    path = manifest_path(output)
    with tf.io.gfile.GFile(f"{path}.partial", "w") as file:
        file.write(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    tf.io.gfile.rename(f"{path}.partial", path, overwrite=True)


def finished_shards(output, directory, settings):
    """Manifest entries of the shards a previous run of the same settings finished."""
    path = manifest_path(output)
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as file:
        previous = json.load(file)
    changed = sorted(key for key in settings if previous.get(key) != settings[key])
    if changed:
        raise ValueError(
            f"{output} was made with other settings (they differ in {', '.join(changed)}); "
            "remove it and its manifest, or choose another output"
        )
    return [e for e in previous["shards"] if tf.io.gfile.exists(os.path.join(directory, e["output"]))]
