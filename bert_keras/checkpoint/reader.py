"""A checkpoint read once: `read_checkpoint` opens each file of a TF1 checkpoint,
Hugging Face / sentence-transformers folder or keras-hub preset once and returns all it holds as a
`Checkpoint`, which every loader (encoder, pre-training model, task heads, `convert`)
takes instead of asking the folder again. A `.keras` file is a whole saved model:
`models.saving.load_keras_file` loads it."""

import dataclasses
import re
import warnings
from pathlib import Path

from bert_keras.checkpoint.hf import HF_CONFIG, HF_WEIGHTS, has_hf_weights, hf_head, read_hf_weights, write_hf
from bert_keras.checkpoint.keras_hub_preset import (
    KERAS_HUB_MASKED_LM,
    is_keras_hub_preset,
    read_preset,
    write_preset,
)
from bert_keras.checkpoint.sentence_transformers import (
    ST_MODULES,
    ST_SETTINGS,
    cross_encoder_activation,
    is_cross_encoder,
    read_sentence_bert_config,
    read_sentence_transformers,
)
from bert_keras.checkpoint.text_files import (
    LABELS,
    VOCAB,
    TokenizerSettings,
    read_json_object,
    read_labels,
    read_tokenizer_config,
    read_vocab,
)
from bert_keras.checkpoint.tf1 import TF1_CONFIG, read_tf1_weights, tf1_head, tf1_prefix, write_tf1
from bert_keras.checkpoint.weights import HEAD_NAMES
from bert_keras.config import BertConfig, read_config_json
from bert_keras.hub import local_checkpoint

FORMATS = ("keras", "hf", "tf1", "keras-hub")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """All a checkpoint holds, read once by `read_checkpoint`.

    `format` is 'keras' (nothing else read), 'hf', 'tf1' or 'keras-hub'; `folder` holds
    the weights' files; `weights` are canonical (`checkpoint.weights`); `vocabulary` the
    tokens of the `vocab_path` beside them (None: no vocab.txt); `tokenizer` what
    tokenizer_config.json says (a keras-hub preset's tokenizer.json and
    preprocessor.json); `head` what the checkpoint says of its task head: a dict with
    `architecture` (config.json's first `architectures`, None for TF1), `labels` (id2label's, or TF1's
    labels.txt; None when absent or the defaults LABEL_0, ...) and `problem_type`, and for a
    keras-hub `BertMaskedLM` `masked_lm`, its head's `BertPretrainer` settings;
    `embedding` a sentence-transformers folder's or keras-hub `BertTextEmbedder`'s
    settings (pooling, normalize, prompts, max_seq_length, lower_case; None for others); `max_seq_length` its
    sentence_bert_config.json's; `cross_encoder` whether it is a CrossEncoder folder and
    `activation` the torch activation it stores (None when unsaid)."""

    path: Path
    format: str
    folder: Path
    config: BertConfig | None = None
    weights: dict = dataclasses.field(default_factory=dict, repr=False)
    vocab_path: Path | None = None
    vocabulary: list | None = dataclasses.field(default=None, repr=False)
    tokenizer: TokenizerSettings = TokenizerSettings()
    head: dict = dataclasses.field(default_factory=lambda: tf1_head(None))
    embedding: dict | None = None
    max_seq_length: int | None = None
    cross_encoder: bool = False
    activation: str | None = None

    def __str__(self):
        return str(self.path)  # messages that name a checkpoint given as a path or as read

    @property
    def head_weights(self):
        """The canonical weights of the heads (pre-training or task) among `weights`."""
        return {name: value for name, value in self.weights.items() if re.search(HEAD_NAMES, name)}


def is_keras_file(path):
    """Whether `path` names a whole saved Keras model (read by `models.saving.load_keras_file`)."""
    return Path(path).suffix == ".keras"


def detect_format(path):
    """'keras', 'hf', 'tf1' or 'keras-hub' for a checkpoint path, or a clear error."""
    path = Path(path)
    if is_keras_file(path):
        return "keras"
    if path.is_dir():
        if has_hf_weights(path):
            return "hf"
        if is_keras_hub_preset(path):
            return "keras-hub"
        if list(path.glob("*.index")):
            return "tf1"
        if (path / "pytorch_model.bin").exists():
            raise ValueError(
                f"{path} holds PyTorch pickles (pytorch_model.bin) and no {HF_WEIGHTS}; bert-keras reads "
                "safetensors only (pickles run code when loaded). Convert it once where transformers and "
                'torch are installed: python -c "import sys, transformers as t; '
                "c = t.AutoConfig.from_pretrained(sys.argv[1]); "
                "getattr(t, (c.architectures or ['BertModel'])[0]).from_pretrained(sys.argv[1])"
                '.save_pretrained(sys.argv[2], safe_serialization=True)" '
                f"{path} {path}-safetensors (then copy its vocab.txt and tokenizer files across)"
            )
        raise FileNotFoundError(
            f"{path} has no {HF_WEIGHTS}, no TF1 checkpoint (*.index), no keras-hub preset and is not a .keras file"
        )
    if Path(f"{path}.index").exists():
        return "tf1"
    raise FileNotFoundError(f"no checkpoint at {path}")


def read_checkpoint(path, format=None, sentence_transformers=False, revision=None):
    """Everything a checkpoint holds, each of its files opened once: a `Checkpoint`.

    `path` is a `.keras` file, a TF1 checkpoint folder or prefix, a Hugging Face folder,
    a sentence-transformers folder (its weights may sit in a sub-folder), a keras-hub BERT
    preset folder or `kaggle://` handle, or a Hugging Face Hub name
    (`ORG/NAME[@REVISION]`, `hf://ORG/NAME`; `revision` pins one), read from its snapshot
    in the Hugging Face cache (`bert_keras.hub`); a `Checkpoint` already read comes back
    as it is. `format` (one of `FORMATS`) skips detection.
    `sentence_transformers=True` (an embedder's loader) makes modules bert-keras does not
    read an error naming them; otherwise such a folder is read as the Hugging Face folder
    it holds."""
    if isinstance(path, Checkpoint):
        return path
    if format is not None and format not in FORMATS:
        raise ValueError(f"cannot read format {format!r}; use one of {list(FORMATS)}")
    path = Path(local_checkpoint(path, revision))
    if (format or ("keras" if is_keras_file(path) else None)) == "keras":
        return Checkpoint(path, "keras", path.parent)
    settings = read_json_object(path / ST_SETTINGS) if path.is_dir() else {}
    root_config = _root_config(path)
    cross = is_cross_encoder(settings, root_config or {})
    embedding = None
    if path.is_dir() and (path / ST_MODULES).is_file() and not cross:
        embedding = _embedding(path, settings, sentence_transformers)
    folder = embedding["encoder"] if embedding else path
    format = format or detect_format(folder)
    if format == "keras-hub":
        return Checkpoint(path=path, format=format, folder=folder, **read_preset(folder))
    weights, config, head, folder = _read_weights(folder, format, root_config if folder == path else None)
    vocab_path = folder / VOCAB if (folder / VOCAB).exists() else None
    max_seq_length, lower_case = read_sentence_bert_config(folder) if folder.is_dir() else (None, None)
    if embedding:
        embedding = {**embedding, "max_seq_length": max_seq_length, "lower_case": lower_case}
    return Checkpoint(
        path=path,
        format=format,
        folder=folder,
        config=config,
        weights=weights,
        vocab_path=vocab_path,
        vocabulary=None if vocab_path is None else read_vocab(vocab_path),
        tokenizer=read_tokenizer_config(folder),
        head=head,
        embedding=embedding,
        max_seq_length=max_seq_length,
        cross_encoder=cross,
        activation=cross_encoder_activation(settings, root_config or {}),
    )


def _root_config(path):
    """The JSON of the config.json in a folder `path`, or None."""
    return read_config_json(path / HF_CONFIG) if path.is_dir() and (path / HF_CONFIG).is_file() else None


def _embedding(path, settings, strict):
    try:
        return read_sentence_transformers(path, settings)
    except (ValueError, FileNotFoundError):  # modules bert-keras does not read, or a module's file missing
        if strict:
            raise
        return None


def _read_weights(path, format, config_values=None):
    """(weights, config, head, folder) of a TF1 checkpoint or HF folder; `config_values`
    is its config.json when already read."""
    if format == "tf1":
        prefix, folder = tf1_prefix(path)
        weights = read_tf1_weights(prefix)
        return weights, _config(folder / TF1_CONFIG), tf1_head(read_labels(folder / LABELS)), folder
    if format != "hf":
        raise ValueError(f"cannot read weights from format {format!r}; use one of ['tf1', 'hf']")
    if config_values is None and (path / HF_CONFIG).is_file():
        config_values = read_config_json(path / HF_CONFIG)
    # The weights are read first: an unreadable file is the error, whatever the config says.
    weights = read_hf_weights(path, (config_values or {}).get("model_type", "bert"))
    values = config_values if config_values is not None else _config_values(path / HF_CONFIG)
    config = BertConfig.from_json_values(values, path / HF_CONFIG)
    return weights, config, hf_head(values, path / HF_CONFIG), path


def _config_values(path):
    if not path.exists():
        raise FileNotFoundError(f"no BERT config at {path}")
    return read_config_json(path)


def _config(path):
    return BertConfig.from_json_values(_config_values(path), path)


WRITERS = {"tf1": write_tf1, "hf": write_hf, "keras-hub": write_preset}


def write(weights, config, path, format, vocab=None, head=None, tokenizer=None):
    """Writes canonical weights in `format` ('tf1', 'hf' or 'keras-hub'), the vocab
    beside them (a vocab.txt path or a list of tokens), a task head's class and labels
    (`head`, see `hf.head_config`) and how the tokenizer splits (`tokenizer`, a
    `TokenizerSettings`; the original TF1 layout has no place for it). A masked-LM head
    (`head`'s `masked_lm`, see `BertPretrainer.checkpoint_head`) whose activation or
    epsilon `format` does not compute is written with a warning naming both."""
    if format not in WRITERS:
        raise ValueError(f"cannot write format {format!r}; use keras, {', '.join(WRITERS)}")
    kept = (head or {}).get("masked_lm")
    computed = (
        KERAS_HUB_MASKED_LM
        if format == "keras-hub"
        else {"masked_lm_hidden_act": config.hidden_act, "masked_lm_layer_norm_eps": config.layer_norm_eps}
    )
    if kept and kept != computed:
        warnings.warn(
            f"{path}: a {format} checkpoint's masked-LM head computes {_masked_lm_text(computed)}, not this "
            f"model's {_masked_lm_text(kept)}: its masked-LM logits change",
            stacklevel=2,
        )
    WRITERS[format](weights, config, path, vocab, head, tokenizer)


def _masked_lm_text(settings):
    return f"{settings['masked_lm_hidden_act']} and LayerNorm epsilon {settings['masked_lm_layer_norm_eps']:g}"
