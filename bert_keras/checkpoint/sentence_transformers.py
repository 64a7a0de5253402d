"""sentence-transformers folders around a Hugging Face one: an embedding model's
`modules.json` (a BERT `Transformer`, `Pooling`, optional `Normalize`), pooling, maximum
length and prompts, and a CrossEncoder's activation."""

import json
from pathlib import Path

from bert_keras.checkpoint.text_files import read_json, read_json_object, saved_length, write_tokenizer_config

ST_MODULES = "modules.json"
ST_SETTINGS = "config_sentence_transformers.json"
ST_BERT_CONFIG = "sentence_bert_config.json"
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
# v6's `pooling_mode` values, by the same names.
ST_POOLING_NAMES = {"cls": "cls", "mean": "mean", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len"}
ST_PROMPTS = ("query", "document")
# The activations a CrossEncoder stores (as torch class paths), by the names `BertReranker` uses.
CROSS_ENCODER_ACTIVATIONS = {
    "sigmoid": "torch.nn.modules.activation.Sigmoid",
    "identity": "torch.nn.modules.linear.Identity",
    "tanh": "torch.nn.modules.activation.Tanh",
}


def is_cross_encoder(settings, config):
    """Whether a folder is a sentence-transformers CrossEncoder, from its
    config_sentence_transformers.json (`settings`: v5+ names itself one) and config.json
    (`config`: older ones keep their activation there)."""
    if settings.get("model_type") == "CrossEncoder":
        return True
    return "activation_fn" in (config.get("sentence_transformers") or {}) or bool(
        config.get("sbert_ce_default_activation_function")
    )


def cross_encoder_activation(settings, config):
    """The torch class path of a CrossEncoder's activation: config_sentence_transformers.json's
    `activation_fn` (v5+), config.json's `sentence_transformers.activation_fn` (v4) or
    `sbert_ce_default_activation_function` (older); None when unsaid."""
    return (
        settings.get("activation_fn")
        or (config.get("sentence_transformers") or {}).get("activation_fn")
        or config.get("sbert_ce_default_activation_function")
    )


def activation_name(torch_path, source):
    """The name `BertReranker` gives a CrossEncoder activation (None stays None)."""
    names = {path: name for name, path in CROSS_ENCODER_ACTIVATIONS.items()}
    if torch_path and torch_path not in names:
        raise ValueError(f"{source}: CrossEncoder activation {torch_path!r}; bert-keras reads {sorted(names)}")
    return names.get(torch_path)


def read_sentence_transformers(path, settings):
    """The settings of a sentence-transformers folder made of a BERT `Transformer`,
    `Pooling` and optional `Normalize` (`modules.json`; `settings` is its
    config_sentence_transformers.json, already read): a dict with `encoder` (the Hugging
    Face folder of the weights), `pooling`, `normalize` and `prompts` ({"query": ...,
    "document": ...}). Other module chains are an error naming the module, not a model
    that silently embeds differently."""
    path = Path(path)
    modules_file = path / ST_MODULES
    try:
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
        types = [(module["type"], module.get("path", "")) for module in modules]
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(f"{modules_file}: not a sentence-transformers modules list ({error})") from None
    names = [kind for kind, _ in types]
    # v6 saves the same modules under their new paths (`sentence_transformers.base.modules.transformer.Transformer`).
    classes = [kind.rsplit(".", 1)[-1] if kind.startswith("sentence_transformers.") else kind for kind in names]
    supported = classes[:2] == ["Transformer", "Pooling"] and classes[2:] in ([], ["Normalize"])
    if not supported:
        raise ValueError(
            f"{modules_file}: modules {names}; bert-keras reads Transformer, Pooling and an optional Normalize"
        )
    prompts = settings.get("prompts") or {}
    return {
        "encoder": path / types[0][1],
        "pooling": _pooling_mode(path / types[1][1] / "config.json"),
        "normalize": len(names) == 3,
        "prompts": {
            name: prompts.get(name) or prompts.get("passage" if name == "document" else name) for name in ST_PROMPTS
        },
    }


def _pooling_mode(config_file):
    """The pooling a Pooling/config.json names: v6's `pooling_mode` ("cls", or a list of
    one), or the older flags (`pooling_mode_cls_token`: true)."""
    pooling_config = read_json(config_file)
    if "pooling_mode" in pooling_config:
        mode = pooling_config["pooling_mode"]
        mode = mode[0] if isinstance(mode, list) and len(mode) == 1 else mode
        if not isinstance(mode, str) or mode not in ST_POOLING_NAMES:
            raise ValueError(f"{config_file}: pooling_mode {mode!r}; bert-keras reads one of {list(ST_POOLING_NAMES)}")
        return ST_POOLING_NAMES[mode]
    modes = [mode for mode, flag in ST_POOLING_MODES.items() if pooling_config.get(flag)]
    others = sorted(
        key
        for key, value in pooling_config.items()
        if key.startswith("pooling_mode_") and value and key not in ST_POOLING_MODES.values()
    )
    if len(modes) != 1 or others:
        raise ValueError(
            f"{config_file}: pooling {modes + others}; bert-keras reads exactly "
            f"one of {list(ST_POOLING_MODES.values())}"
        )
    return modes[0]


def read_sentence_bert_config(folder):
    """(max_seq_length or None, lower_case: True or None for the tokenizer's own setting)
    of the sentence_bert_config.json in `folder`."""
    values = read_json_object(Path(folder) / ST_BERT_CONFIG)
    return saved_length(values, "max_seq_length"), True if values.get("do_lower_case") else None


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
        ST_BERT_CONFIG: {"max_seq_length": max_seq_length, "do_lower_case": False},
        ST_SETTINGS: {
            "prompts": {name: prompt for name, prompt in prompts.items() if prompt},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    }
    for name, values in files.items():
        (path / name).write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
    write_tokenizer_config(path, lower_case, max_seq_length)
