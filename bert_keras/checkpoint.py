"""Reading and writing BERT weights in the original TF1 and Hugging Face formats.

Weights move through one canonical form: a dict from the original google-research/bert
variable names (`bert/encoder/layer_0/attention/self/query/kernel`, ...) to numpy
arrays laid out as the original stores them ([in, out] kernels). Hugging Face names
and [out, in] Linear weights are translated to and from it, and each Keras model
lists which canonical names fill each of its variables (its `original_weight_map()`).
"""

import json
import re
import shutil
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bert_keras.config import BertConfig

TF1_CONFIG = "bert_config.json"
TF1_PREFIX = "bert_model.ckpt"
HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"
VOCAB = "vocab.txt"

# Variables that training leaves in original checkpoints and that hold no model weight.
TF1_IGNORED = re.compile(r"(^global_step$|/adam_[mv]$|^bad_steps$|^good_steps$|^loss_scale)")
# Hugging Face entries that duplicate or derive from other weights.
HF_IGNORED = re.compile(r"(^embeddings\.position_ids$|^cls\.predictions\.decoder\.(weight|bias)$)")


def get_original_weights(weight_map):
    """The canonical {original name: array} of a model's weight map."""
    weights = {}
    for variable, names in weight_map:
        parts = np.split(keras.ops.convert_to_numpy(variable.value), len(names), axis=-1)
        weights.update(zip(names, parts))
    return weights


def set_original_weights(weight_map, weights, ignore=None, source="checkpoint"):
    """Assigns canonical weights; any missing, unexpected or mis-shaped name is an error.

    `ignore` is a regex of names that may be present but are not this model's (for
    example the `cls/` pre-training heads when loading an encoder alone).
    """
    expected = {}
    for variable, names in weight_map:
        *outer, last = variable.shape
        for name in names:
            expected[name] = (*outer, last // len(names))
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(name for name in set(weights) - set(expected) if not (ignore and re.search(ignore, name)))
    mis_shaped = sorted(
        f"{name}: {source} has {tuple(weights[name].shape)}, model expects {expected[name]}"
        for name in set(expected) & set(weights)
        if tuple(weights[name].shape) != tuple(expected[name])
    )
    problems = []
    if missing:
        problems.append(f"missing from {source} ({len(missing)}): {missing}")
    if unexpected:
        problems.append(f"unexpected in {source} ({len(unexpected)}): {unexpected}")
    if mis_shaped:
        problems.append(f"shape mismatch ({len(mis_shaped)}): {mis_shaped}")
    if problems:
        raise ValueError("Checkpoint does not fit the model:\n  " + "\n  ".join(problems))
    for variable, names in weight_map:
        value = np.concatenate([np.asarray(weights[name]) for name in names], axis=-1)
        variable.assign(value.astype(variable.dtype))


# ----------------------------------------------------------------------------- formats


def is_keras_file(path):
    """Whether `path` names a whole saved Keras model (read by `models.saving.load_keras_file`)."""
    return Path(path).suffix == ".keras"


def detect_format(path):
    """'keras', 'hf' or 'tf1' for a checkpoint path, or a clear error."""
    path = Path(path)
    if is_keras_file(path):
        return "keras"
    if path.is_dir():
        if (path / HF_WEIGHTS).exists():
            return "hf"
        if list(path.glob("*.index")):
            return "tf1"
        if (path / "pytorch_model.bin").exists():
            raise ValueError(
                f"{path} holds PyTorch pickles (pytorch_model.bin); bert-keras reads "
                "safetensors only: re-save the model with safe_serialization=True"
            )
        raise FileNotFoundError(f"{path} has no {HF_WEIGHTS}, no TF1 checkpoint (*.index) and is not a .keras file")
    if Path(f"{path}.index").exists():
        return "tf1"
    raise FileNotFoundError(f"no checkpoint at {path}")


def read_tf1(path):
    """(weights, config, vocab path or None) from an original checkpoint dir or prefix."""
    path = Path(path)
    if path.is_dir():
        prefix = tf.train.latest_checkpoint(str(path))
        if prefix is None:
            indexes = sorted(path.glob("*.index"))
            if len(indexes) != 1:
                raise FileNotFoundError(
                    f"{path} has {len(indexes)} checkpoint index files and no `checkpoint` "
                    "state file; pass the checkpoint prefix instead"
                )
            prefix = str(indexes[0])[: -len(".index")]
        folder = path
    else:
        prefix, folder = str(path), path.parent
    name, weights = None, {}
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            if not TF1_IGNORED.search(name):
                weights[name] = reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, IndexError) as error:  # IndexError: a truncated data file
        where = f" (variable {name})" if name else ""
        raise ValueError(f"cannot read TF1 checkpoint {prefix}{where}: {error}") from None
    config = _read_config(folder / TF1_CONFIG)
    return weights, config, _vocab_in(folder)


def write_tf1(weights, config, path, vocab_path=None):
    """Writes `bert_model.ckpt.*`, `bert_config.json` and the vocab in the released layout."""
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
    _copy_vocab(vocab_path, path)


def hf_to_original(name):
    """Hugging Face parameter name -> (original name, transpose?)."""
    name = name.removeprefix("bert.")
    if name == "cls.predictions.bias":
        return "cls/predictions/output_bias", False
    if name.startswith("cls.seq_relationship."):
        return "cls/seq_relationship/output_" + ("weights" if name.endswith("weight") else "bias"), False
    scope = "" if name.startswith("cls.") else "bert/"
    *path, leaf = re.sub(r"layer\.(\d+)", r"layer_\1", name).split(".")
    if path[-1].endswith("_embeddings"):
        return scope + "/".join(path), False
    if path[-1] == "LayerNorm":
        leaf = {"weight": "gamma", "bias": "beta"}.get(leaf, leaf)
        return scope + "/".join(path + [leaf]), False
    if leaf == "weight":
        return scope + "/".join(path + ["kernel"]), True
    return scope + "/".join(path + [leaf]), False


def original_to_hf(name, prefix):
    """Original name -> (Hugging Face name, transpose?); `prefix` is "bert." or ""."""
    if name == "cls/predictions/output_bias":
        return "cls.predictions.bias", False
    if name.startswith("cls/seq_relationship/"):
        return "cls.seq_relationship." + ("weight" if name.endswith("weights") else "bias"), False
    scope = prefix if name.startswith("bert/") else ""
    *path, leaf = re.sub(r"layer_(\d+)", r"layer.\1", name.removeprefix("bert/")).split("/")
    if leaf.endswith("_embeddings"):
        return scope + ".".join(path + [leaf, "weight"]), False
    leaf, transpose = {"kernel": ("weight", True), "gamma": ("weight", False), "beta": ("bias", False)}.get(
        leaf, (leaf, False)
    )
    return scope + ".".join(path + [leaf]), transpose


def read_hf(path):
    """(weights, config, vocab path or None) from a Hugging Face folder with safetensors."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = Path(path)
    try:
        tensors = load_file(str(path / HF_WEIGHTS))
    except (SafetensorError, TypeError, ValueError) as error:
        raise ValueError(f"cannot read {path / HF_WEIGHTS}: {error}") from None
    weights = {}
    for hf_name, value in tensors.items():
        if HF_IGNORED.search(hf_name.removeprefix("bert.")):
            continue
        name, transpose = hf_to_original(hf_name)
        weights[name] = value.T if transpose else value
    return weights, _read_config(path / HF_CONFIG), _vocab_in(path)


def write_hf(weights, config, path, vocab_path=None):
    """Writes `config.json` + `model.safetensors` (+ vocab) that transformers loads.

    With pre-training heads the names are BertForPreTraining's (`bert.` prefix; the
    decoder weight is tied to the word embeddings, so it is not stored); otherwise
    BertModel's.
    """
    from safetensors.numpy import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with_heads = any(name.startswith("cls/") for name in weights)
    tensors = {}
    for name, value in weights.items():
        hf_name, transpose = original_to_hf(name, "bert." if with_heads else "")
        tensors[hf_name] = np.ascontiguousarray(value.T if transpose else value)
    save_file(tensors, str(path / HF_WEIGHTS), metadata={"format": "pt"})
    hf_config = config.to_hf_dict()
    if with_heads:
        hf_config["architectures"] = ["BertForPreTraining"]
    (path / HF_CONFIG).write_text(json.dumps(hf_config, indent=2) + "\n")
    _copy_vocab(vocab_path, path)


READERS = {"tf1": read_tf1, "hf": read_hf}
WRITERS = {"tf1": write_tf1, "hf": write_hf}


def read(path, format=None):
    """(weights, config, vocab path or None) of a TF1 checkpoint or Hugging Face folder."""
    format = format or detect_format(path)
    if format not in READERS:
        raise ValueError(f"cannot read weights from format {format!r}; use one of {list(READERS)}")
    return READERS[format](path)


def write(weights, config, path, format, vocab_path=None):
    """Writes canonical weights in `format` ('tf1' or 'hf'), the vocab beside them."""
    if format not in WRITERS:
        raise ValueError(f"cannot write format {format!r}; use keras, {' or '.join(WRITERS)}")
    WRITERS[format](weights, config, path, vocab_path)


def _read_config(path):
    if not path.exists():
        raise FileNotFoundError(f"no BERT config at {path}")
    return BertConfig.from_json_file(path)


def _vocab_in(folder):
    vocab = Path(folder) / VOCAB
    return vocab if vocab.exists() else None


def _copy_vocab(vocab_path, folder):
    if vocab_path is not None and Path(vocab_path).resolve() != (Path(folder) / VOCAB).resolve():
        shutil.copyfile(vocab_path, Path(folder) / VOCAB)


# ----------------------------------------------------------------- sentence-transformers

ST_MODULES = "modules.json"
ST_TRANSFORMER = "sentence_transformers.models.Transformer"
ST_POOLING = "sentence_transformers.models.Pooling"
ST_NORMALIZE = "sentence_transformers.models.Normalize"
# Pooling/config.json's flags, by the names `BertTextEmbedder` uses for them.
ST_POOLING_MODES = {
    "cls": "pooling_mode_cls_token",
    "mean": "pooling_mode_mean_tokens",
    "max": "pooling_mode_max_tokens",
    "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
}
ST_PROMPTS = ("query", "document")


def is_sentence_transformers(path):
    return Path(path).is_dir() and (Path(path) / ST_MODULES).is_file()


def read_sentence_transformers(path):
    """The settings of a sentence-transformers folder made of a BERT `Transformer`,
    `Pooling` and optional `Normalize` (`modules.json`): a dict with `encoder` (the
    Hugging Face folder of the weights), `pooling`, `normalize`, `max_seq_length`,
    `lower_case` (None: the tokenizer's own setting) and `prompts` ({"query": ...,
    "document": ...} from `config_sentence_transformers.json`). Other module chains are
    an error naming the module, not a model that silently embeds differently."""
    path = Path(path)
    modules_file = path / ST_MODULES
    try:
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
        types = [(module["type"], module.get("path", "")) for module in modules]
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(f"{modules_file}: not a sentence-transformers modules list ({error})") from None
    names = [kind for kind, _ in types]
    supported = names[:1] == [ST_TRANSFORMER] and names[1:2] == [ST_POOLING] and names[2:] in ([], [ST_NORMALIZE])
    if not supported:
        raise ValueError(
            f"{modules_file}: modules {names}; bert-keras reads Transformer, Pooling and an optional Normalize"
        )
    encoder, pooling_folder = path / types[0][1], path / types[1][1]
    pooling_config = _read_json(pooling_folder / "config.json")
    modes = [mode for mode, flag in ST_POOLING_MODES.items() if pooling_config.get(flag)]
    others = sorted(
        key
        for key, value in pooling_config.items()
        if key.startswith("pooling_mode_") and value and key not in ST_POOLING_MODES.values()
    )
    if len(modes) != 1 or others:
        raise ValueError(
            f"{pooling_folder / 'config.json'}: pooling {modes + others}; bert-keras reads exactly "
            f"one of {list(ST_POOLING_MODES.values())}"
        )
    settings = (
        _read_json(encoder / "sentence_bert_config.json") if (encoder / "sentence_bert_config.json").exists() else {}
    )
    prompts = {}
    if (path / "config_sentence_transformers.json").exists():
        prompts = _read_json(path / "config_sentence_transformers.json").get("prompts") or {}
    return {
        "encoder": encoder,
        "pooling": modes[0],
        "normalize": len(names) == 3,
        "max_seq_length": settings.get("max_seq_length"),
        "lower_case": True if settings.get("do_lower_case") else None,
        "prompts": {
            name: prompts.get(name) or prompts.get("passage" if name == "document" else name) for name in ST_PROMPTS
        },
    }


def write_sentence_transformers(path, pooling, normalize, max_seq_length, lower_case, hidden_size, prompts):
    """The sentence-transformers files beside a Hugging Face folder at `path` (written by
    `write_hf`): `modules.json`, `1_Pooling/config.json`, `2_Normalize/`,
    `sentence_bert_config.json`, `config_sentence_transformers.json` and the tokenizer's
    `tokenizer_config.json`, so `SentenceTransformer(path)` embeds as the model does."""
    path = Path(path)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": ST_TRANSFORMER},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": ST_POOLING},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": ST_NORMALIZE})
        (path / "2_Normalize").mkdir(exist_ok=True)
    (path / "1_Pooling").mkdir(exist_ok=True)
    pooling_config = {
        "word_embedding_dimension": hidden_size,
        **{flag: mode == pooling for mode, flag in ST_POOLING_MODES.items()},
    }
    files = {
        ST_MODULES: modules,
        "1_Pooling/config.json": pooling_config,
        "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False},
        "config_sentence_transformers.json": {
            "prompts": {name: prompt for name, prompt in prompts.items() if prompt},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
        "tokenizer_config.json": {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": lower_case,
            "model_max_length": max_seq_length,
        },
    }
    for name, values in files.items():
        (path / name).write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")


def _read_json(path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no {Path(path).name} at {path}") from None
    except ValueError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
