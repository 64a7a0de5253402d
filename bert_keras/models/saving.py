"""One load/save path for every model that has original (google-research/bert) weight names.

A model class provides `original_weight_map()` (its variables -> original names, see
`checkpoint.set_original_weights`), `from_original_weights(weights, config, source)`,
`checkpoint_head()` (what `checkpoint.write` records of its head, or None), `config`
and `vocab_path`. Reading (`checkpoint.read_checkpoint`, once), the `.keras`
case and the vocab beside the weights are then the same for the encoder, the
pre-training model and the encoder under a task head.
"""

import zipfile
from pathlib import Path

import keras

from bert_keras.checkpoint.reader import read_checkpoint, write
from bert_keras.checkpoint.weights import get_original_weights
from bert_keras.compat import draws_deferred


def load_keras_file(path, cls=keras.Model):
    """`keras.saving.load_model(path)`, which must hold a `cls` (a class or a tuple of
    them): the one `.keras` loader, with errors that name a missing, truncated or foreign
    file (for a truncated one Keras says "File not found") or a model of another class."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no .keras file at {path}")
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            corrupt = archive.testzip()
    except (zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"{path}: not a .keras file, or truncated: not a complete zip archive ({error})") from None
    if "config.json" not in names:
        raise ValueError(f"{path}: not a Keras 3 .keras file (no config.json inside, only {names[:5]})")
    if corrupt:
        raise ValueError(f"{path}: corrupt: {corrupt} inside fails its CRC check")
    with draws_deferred():  # the load writes every variable
        model = keras.saving.load_model(path)
    if not isinstance(model, cls):
        wanted = " or ".join(c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,)))
        raise ValueError(f"{path} holds a {type(model).__name__}, not a {wanted}")
    return model


def load_checkpoint(cls, path, format=None, config=None, keras_classes=(), revision=None, **kwargs):
    """A `cls` from a TF1 checkpoint, a Hugging Face folder or a `.keras` file, read once.

    `path` is a path, a Hugging Face Hub name (`revision` pins one) or a
    `checkpoint.Checkpoint` already read. `config` overrides the
    config file beside the weights (e.g. to change dropout); `kwargs` go to
    `cls.from_original_weights`. A `.keras` file must hold a `cls`, or one of
    `keras_classes`, returned as saved (a task head whose encoder a task asks for).
    """
    found = read_checkpoint(path, format, revision=revision)
    if found.format == "keras":
        return load_keras_file(found.path, (*keras_classes, cls) if keras_classes else cls)
    source = f"{found.format} checkpoint {found.path}"
    with draws_deferred():  # a part the checkpoint lacks is drawn as it would have been
        model = cls.from_original_weights(found.weights, config or found.config, source, **kwargs)
    model.vocab_path = found.vocab_path
    return model


def save_checkpoint(model, path, format, vocab_path=None, head=None, tokenizer=None):
    """Writes `model` as a `.keras` file, a Hugging Face folder, a TF1 checkpoint or a
    keras-hub preset, with `vocab_path` (a vocab.txt path or the tokens; default: the
    vocab.txt it was loaded with), a task head's class and labels (`head`, see
    `checkpoint.hf.head_config`; default: the model's `checkpoint_head()`) and the
    tokenizer's `TokenizerSettings`."""
    if format == "keras":
        model.save(path)
        return
    weights = get_original_weights(model.original_weight_map())
    head = head or model.checkpoint_head()
    write(weights, model.config, path, format, vocab_path or model.vocab_path, head, tokenizer)
