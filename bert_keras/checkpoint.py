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
import warnings
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bert_keras.config import BertConfig
from bert_keras.files import read_text

TF1_CONFIG = "bert_config.json"
TF1_PREFIX = "bert_model.ckpt"
HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"
VOCAB = "vocab.txt"

# Variables that training leaves in original checkpoints and that hold no model weight.
TF1_IGNORED = re.compile(r"(^global_step$|/adam_[mv]$|^bad_steps$|^good_steps$|^loss_scale)")
# Hugging Face entries that duplicate or derive from other weights (the tied decoder is
# checked against the word embeddings by `read_hf`).
HF_IGNORED = re.compile(r"(^embeddings\.position_ids$|^cls\.predictions\.decoder\.(weight|bias)$)")
# The heads of the original scripts, in their [out, in] layout: run_classifier's
# `output_weights` [num_labels, H] (also what token classification and multiple choice
# use) and run_squad's `cls/squad/output_weights` [2, H]; Hugging Face's BertFor* name them so.
HF_HEADS = {
    "classifier.weight": "output_weights",
    "classifier.bias": "output_bias",
    "qa_outputs.weight": "cls/squad/output_weights",
    "qa_outputs.bias": "cls/squad/output_bias",
}
# Names of head variables: everything an encoder ignores.
HEAD_NAMES = r"^(cls/|output_weights$|output_bias$)"
# The pooler, which BertForTokenClassification, BertForQuestionAnswering and
# BertForMaskedLM do not have: a model loaded from them starts a new one.
POOLER_NAMES = r"^bert/pooler/"
HF_WITHOUT_POOLER = ("BertForTokenClassification", "BertForQuestionAnswering", "BertForMaskedLM")
LABELS = "labels.txt"


class Transposed:
    """A 2-D variable seen as its transpose, for weight maps of heads whose original
    layout is [out, in] (run_classifier's `output_weights`) while Keras' Dense is [in, out]."""

    def __init__(self, variable):
        self.variable = variable

    @property
    def shape(self):
        return tuple(reversed(self.variable.shape))

    @property
    def dtype(self):
        return self.variable.dtype

    @property
    def value(self):
        return keras.ops.transpose(self.variable.value)

    def assign(self, value):
        self.variable.assign(np.transpose(value))


def get_original_weights(weight_map):
    """The canonical {original name: array} of a model's weight map."""
    weights = {}
    for variable, names in weight_map:
        parts = np.split(keras.ops.convert_to_numpy(variable.value), len(names), axis=-1)
        weights.update(zip(names, parts))
    return weights


def set_original_weights(weight_map, weights, ignore=None, source="checkpoint", optional=None):
    """Assigns canonical weights; any missing, unexpected or mis-shaped name is an error.

    `ignore` is a regex of names that may be present but are not this model's (for
    example the `cls/` pre-training heads when loading an encoder alone); `optional`
    one of a part that may be missing as a whole (its variables keep their initial
    values, with a warning).
    """
    expected = {}
    for variable, names in weight_map:
        *outer, last = variable.shape
        for name in names:
            expected[name] = (*outer, last // len(names))
    part = {name for name in expected if optional and re.search(optional, name)}
    absent = sorted(part) if not part & set(weights) else []  # the whole part, or it is incomplete
    if absent:
        warnings.warn(f"{source} has no {absent}: starting them from new initial values", stacklevel=3)
        weight_map = [(variable, names) for variable, names in weight_map if names[0] not in absent]
        expected = {name: shape for name, shape in expected.items() if name not in absent}
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
                f"{path} holds PyTorch pickles (pytorch_model.bin) and no {HF_WEIGHTS}; bert-keras reads "
                "safetensors only (pickles run code when loaded). Convert it once where transformers and "
                'torch are installed: python -c "import sys, transformers as t; '
                "c = t.AutoConfig.from_pretrained(sys.argv[1]); "
                "getattr(t, (c.architectures or ['BertModel'])[0]).from_pretrained(sys.argv[1])"
                '.save_pretrained(sys.argv[2], safe_serialization=True)" '
                f"{path} {path}-safetensors (then copy its vocab.txt and tokenizer files across)"
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


def write_tf1(weights, config, path, vocab_path=None, head=None):
    """Writes `bert_model.ckpt.*`, `bert_config.json` and the vocab in the released layout,
    and a task head's label names (`head`, see `head_config`) as labels.txt, one a line."""
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
    if head and head.get("labels"):
        (path / LABELS).write_text("".join(f"{label}\n" for label in head["labels"]), encoding="utf-8")


def hf_to_original(name):
    """Hugging Face parameter name -> (original name, transpose?)."""
    name = name.removeprefix("bert.")
    if name in HF_HEADS:
        return HF_HEADS[name], False
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
    heads = {original: hf for hf, original in HF_HEADS.items()}
    if name in heads:
        return heads[name], False
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
    tensors = {name.removeprefix("bert."): value for name, value in tensors.items()}
    weights = {}
    for hf_name, value in tensors.items():
        if HF_IGNORED.search(hf_name):
            continue
        name, transpose = hf_to_original(hf_name)
        weights[name] = value.T if transpose else value
    _check_decoder(tensors, weights, path / HF_WEIGHTS)
    return weights, _read_config(path / HF_CONFIG), _vocab_in(path)


def _check_decoder(tensors, weights, source):
    """A masked-LM decoder saved untied (its own weight, or its bias as `decoder.bias`)
    loads when it equals the word embeddings it is tied to here; a different one is an error."""
    decoder = tensors.get("cls.predictions.decoder.weight")
    embeddings = weights.get("bert/embeddings/word_embeddings")
    if decoder is not None and embeddings is not None and not np.array_equal(decoder, embeddings):
        raise ValueError(
            f"{source}: cls.predictions.decoder.weight differs from the word embeddings; bert-keras ties the "
            "masked-LM decoder to them, so this untied decoder cannot be loaded"
        )
    if "cls.predictions.decoder.bias" in tensors:
        weights.setdefault("cls/predictions/output_bias", tensors["cls.predictions.decoder.bias"])


def write_hf(weights, config, path, vocab_path=None, head=None):
    """Writes `config.json` + `model.safetensors` (+ vocab) that transformers loads.

    `head` (see `head_config`) names the task model's BertFor* class and its labels;
    without one, pre-training heads make it BertForPreTraining (BertForMaskedLM with no
    next-sentence head), else BertModel. The masked-LM decoder weight is tied to the
    word embeddings, so it is not stored; classes without a pooler get none.
    """
    from safetensors.numpy import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if head:
        architecture = head["architecture"]
    elif any(name.startswith("cls/seq_relationship/") for name in weights):
        architecture = "BertForPreTraining"
    elif any(name.startswith("cls/") for name in weights):
        architecture = "BertForMaskedLM"
    else:
        architecture = "BertModel"
    prefix = "" if architecture == "BertModel" else "bert."
    tensors = {}
    for name, value in weights.items():
        if architecture in HF_WITHOUT_POOLER and re.search(POOLER_NAMES, name):
            continue
        hf_name, transpose = original_to_hf(name, prefix)
        tensors[hf_name] = np.ascontiguousarray(value.T if transpose else value)
    save_file(tensors, str(path / HF_WEIGHTS), metadata={"format": "pt"})
    hf_config = {**config.to_hf_dict(), "architectures": [architecture], **head_config(head)}
    (path / HF_CONFIG).write_text(json.dumps(hf_config, indent=2) + "\n")
    _copy_vocab(vocab_path, path)


def head_config(head):
    """config.json's fields for a task head: `head` is a dict with `architecture`,
    `num_labels`, `labels` (names, or None for LABEL_0, ...) and `problem_type` (or None)."""
    if not head or head.get("num_labels") is None:
        return {}
    labels = head.get("labels") or [f"LABEL_{i}" for i in range(head["num_labels"])]
    values = {
        "id2label": {str(i): label for i, label in enumerate(labels)},
        "label2id": {label: i for i, label in enumerate(labels)},
    }
    if head.get("problem_type"):
        values["problem_type"] = head["problem_type"]
    return values


def read_head(path, format=None):
    """What a checkpoint says of its task head: a dict with `architecture` (config.json's
    first `architectures`, None for TF1), `labels` (from `id2label`, or TF1's labels.txt;
    None when absent or the defaults LABEL_0, ...) and `problem_type`."""
    format = format or detect_format(path)
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    if format == "tf1":
        labels_file = folder / LABELS
        labels = read_text(labels_file, "labels").splitlines() if labels_file.exists() else None
        return {"architecture": None, "labels": labels, "problem_type": None}
    values = _read_json(folder / HF_CONFIG)
    id2label = values.get("id2label") or {}
    try:
        ids = sorted(int(key) for key in id2label)
    except ValueError:
        raise ValueError(f"{folder / HF_CONFIG}: id2label keys must be integers, got {sorted(id2label)}") from None
    if ids != list(range(len(ids))):
        raise ValueError(f"{folder / HF_CONFIG}: id2label must number the labels 0..{len(ids) - 1}, got {ids}")
    labels = [str(id2label[str(i)]) for i in ids] or None
    if labels == [f"LABEL_{i}" for i in range(len(ids))]:
        labels = None
    architectures = values.get("architectures") or [None]
    return {"architecture": architectures[0], "labels": labels, "problem_type": values.get("problem_type")}


READERS = {"tf1": read_tf1, "hf": read_hf}
WRITERS = {"tf1": write_tf1, "hf": write_hf}


def read(path, format=None):
    """(weights, config, vocab path or None) of a TF1 checkpoint or Hugging Face folder."""
    format = format or detect_format(path)
    if format not in READERS:
        raise ValueError(f"cannot read weights from format {format!r}; use one of {list(READERS)}")
    return READERS[format](path)


def write(weights, config, path, format, vocab_path=None, head=None):
    """Writes canonical weights in `format` ('tf1' or 'hf'), the vocab beside them, and a
    task head's class and labels (`head`, see `head_config`)."""
    if format not in WRITERS:
        raise ValueError(f"cannot write format {format!r}; use keras, {' or '.join(WRITERS)}")
    WRITERS[format](weights, config, path, vocab_path, head)


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
    """Whether `path` is a sentence-transformers embedding folder (a CrossEncoder's,
    which also has modules.json, is read as the Hugging Face folder it holds)."""
    path = Path(path)
    return path.is_dir() and (path / ST_MODULES).is_file() and not is_cross_encoder(path)


def is_cross_encoder(path):
    """Whether `path` is a sentence-transformers CrossEncoder folder (v5+ names itself one
    in config_sentence_transformers.json; older ones keep their activation in config.json)."""
    path = Path(path)
    settings = path / "config_sentence_transformers.json"
    if settings.is_file() and _read_json(settings).get("model_type") == "CrossEncoder":
        return True
    config = path / HF_CONFIG
    if not config.is_file():
        return False
    values = _read_json(config)
    return "activation_fn" in (values.get("sentence_transformers") or {}) or bool(
        values.get("sbert_ce_default_activation_function")
    )


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
    }
    for name, values in files.items():
        (path / name).write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
    write_tokenizer_config(path, lower_case, max_seq_length)


def write_tokenizer_config(path, lower_case, max_seq_length):
    """`tokenizer_config.json` beside a vocab.txt, so transformers' AutoTokenizer splits
    and truncates text as the model's preprocessor does."""
    values = {"tokenizer_class": "BertTokenizer", "do_lower_case": lower_case, "model_max_length": max_seq_length}
    (Path(path) / "tokenizer_config.json").write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")


def _read_json(path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no {Path(path).name} at {path}") from None
    except ValueError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None


# The activations a CrossEncoder stores (as torch class paths), by the names `BertReranker` uses.
CROSS_ENCODER_ACTIVATIONS = {
    "sigmoid": "torch.nn.modules.activation.Sigmoid",
    "identity": "torch.nn.modules.linear.Identity",
    "tanh": "torch.nn.modules.activation.Tanh",
}


def read_cross_encoder(path):
    """A sentence-transformers CrossEncoder folder's settings: `activation` (from
    `config_sentence_transformers.json`'s `activation_fn` (v5+), config.json's
    `sentence_transformers.activation_fn` (v4) or `sbert_ce_default_activation_function`
    (older); None when unsaid) and `max_seq_length` (the tokenizer's `model_max_length`,
    or sentence_bert_config.json's; None when unsaid)."""
    path = Path(path)
    config = _read_json(path / HF_CONFIG)
    found = None
    if (path / "config_sentence_transformers.json").exists():
        found = _read_json(path / "config_sentence_transformers.json").get("activation_fn")
    found = (
        found
        or (config.get("sentence_transformers") or {}).get("activation_fn")
        or config.get("sbert_ce_default_activation_function")
    )
    names = {torch_path: name for name, torch_path in CROSS_ENCODER_ACTIVATIONS.items()}
    if found and found not in names:
        raise ValueError(f"{path}: CrossEncoder activation {found!r}; bert-keras reads {sorted(names)}")
    lengths = [tokenizer_max_length(path), _saved_length(path / "sentence_bert_config.json", "max_seq_length")]
    lengths = [length for length in lengths if length is not None]
    return {"activation": names.get(found), "max_seq_length": lengths[0] if lengths else None}


def _saved_length(path, key):
    """`key` of the JSON file `path` if it is a length, None if the file or the key is
    missing or holds transformers' "no limit" placeholder (about 1e30)."""
    if not Path(path).is_file():
        return None
    content = _read_json(path)
    if not isinstance(content, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(content).__name__}")
    length = content.get(key)
    return length if isinstance(length, int) and 0 < length < 1_000_000 else None


def tokenizer_max_length(folder):
    """The maximum length `tokenizer_config.json` in a Hugging Face `folder` gives its
    tokenizer (`model_max_length`, which transformers truncates and windows at); None
    when unsaid."""
    return _saved_length(Path(folder) / "tokenizer_config.json", "model_max_length")
