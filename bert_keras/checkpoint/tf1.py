"""The original google-research/bert layout: `bert_config.json`, `bert_model.ckpt.*`
(read with `tf.train.load_checkpoint`, written with `SaveV2`), `vocab.txt` and, for a
fine-tuned head, `labels.txt`. Its variable names are the canonical names already."""

import re
from pathlib import Path

import tensorflow as tf

from bert_keras.checkpoint.text_files import LABELS, VOCAB, write_labels, write_vocab

TF1_CONFIG = "bert_config.json"
TF1_PREFIX = "bert_model.ckpt"
# Variables that training leaves in original checkpoints and that hold no model weight.
TF1_IGNORED = re.compile(r"(^global_step$|/adam_[mv]$|^bad_steps$|^good_steps$|^loss_scale)")


def tf1_prefix(path):
    """(checkpoint prefix, folder) of a TF1 checkpoint folder or prefix: a folder's is
    the one its `checkpoint` state file names, else its only `*.index`."""
    path = Path(path)
    if not path.is_dir():
        return str(path), path.parent
    prefix = tf.train.latest_checkpoint(str(path))
    if prefix is None:
        indexes = sorted(path.glob("*.index"))
        if len(indexes) != 1:
            raise FileNotFoundError(
                f"{path} has {len(indexes)} checkpoint index files and no `checkpoint` "
                "state file; pass the checkpoint prefix instead"
            )
        prefix = str(indexes[0])[: -len(".index")]
    return prefix, path


def read_tf1_weights(prefix):
    """The canonical weights of the checkpoint at `prefix` (optimizer slots and step
    counters left out)."""
    name, weights = None, {}
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            if not TF1_IGNORED.search(name):
                weights[name] = reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, IndexError) as error:  # IndexError: a truncated data file
        where = f" (variable {name})" if name else ""
        raise ValueError(f"cannot read TF1 checkpoint {prefix}{where}: {error}") from None
    return weights


def tf1_head(labels):
    """What a TF1 checkpoint says of its task head: no class, the labels.txt names."""
    return {"architecture": None, "labels": labels, "problem_type": None}


def write_tf1(weights, config, path, vocab=None, head=None, tokenizer=None):
    """Writes `bert_model.ckpt.*`, `bert_config.json` and the vocab in the released layout,
    and a task head's label names (`head`, see `hf.head_config`) as labels.txt; the layout
    has no place for the `tokenizer` settings."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    names = sorted(weights)
    tf.raw_ops.SaveV2(
        prefix=str(path / TF1_PREFIX),
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[tf.constant(weights[name]) for name in names],
    )
    (path / "checkpoint").write_text(
        f'model_checkpoint_path: "{TF1_PREFIX}"\nall_model_checkpoint_paths: "{TF1_PREFIX}"\n'
    )
    config.write_original_json(path / TF1_CONFIG)
    if vocab is not None:
        write_vocab(vocab, path / VOCAB)
    if head and head.get("labels"):
        write_labels(head["labels"], path / LABELS)
