"""keras-hub BERT presets, the folders `save_to_preset` writes: config.json (the
`BertBackbone`'s arguments), model.weights.h5, task.json and task.weights.h5 for a task,
tokenizer.json and assets/tokenizer/vocabulary.txt. Read with h5py, so keras-hub need not
be installed; written through keras-hub's own objects and `save_to_preset`, so the JSON
files carry the module paths, registered names and versions keras-hub checks on loading
(a copy of them written here would break with keras-hub's next format), and the weights
are then put into its .weights.h5 files by the one table that reads them.

keras-hub's `BertBackbone` computes the tanh approximation of GELU: a preset reads as a
`gelu_tanh` config, and a model of exact GELU written out changes its outputs slightly. Its
`BertMaskedLM` head computes exact GELU and LayerNorm epsilon 1e-5 (`KERAS_HUB_MASKED_LM`),
which a `BertPretrainer` keeps as its own masked-LM head's settings."""

import re
import warnings
from pathlib import Path

import numpy as np

from bert_keras.checkpoint.text_files import (
    TokenizerSettings,
    infer_lower_case,
    read_json_object,
    read_vocab,
    saved_length,
)
from bert_keras.checkpoint.weights import HEAD_NAMES
from bert_keras.config import BertConfig

PRESET_CONFIG = "config.json"
PRESET_METADATA = "metadata.json"
PRESET_WEIGHTS = "model.weights.h5"
TASK_CONFIG = "task.json"
TASK_WEIGHTS = "task.weights.h5"
PRESET_TOKENIZER = "tokenizer.json"
PRESET_PREPROCESSOR = "preprocessor.json"
PRESET_VOCAB = "assets/tokenizer/vocabulary.txt"
BACKBONE = "keras_hub>BertBackbone"
CLASSIFIER = "keras_hub>BertTextClassifier"
MASKED_LM = "keras_hub>BertMaskedLM"
TEXT_EMBEDDER = "keras_hub>BertTextEmbedder"
# Each .weights.h5 variable (its layer's name, the sub-layers' attributes, its index) and
# the canonical name it holds: the layers outside the transformer layers, then each
# transformer_layer_N's sub-layers and their scope under bert/encoder/layer_N/.
EMBEDDINGS = {
    "token_embedding/0": "bert/embeddings/word_embeddings",
    "position_embedding/0": "bert/embeddings/position_embeddings",
    "segment_embedding/0": "bert/embeddings/token_type_embeddings",
    "embeddings_layer_norm/0": "bert/embeddings/LayerNorm/gamma",
    "embeddings_layer_norm/1": "bert/embeddings/LayerNorm/beta",
    "pooled_dense/0": "bert/pooler/dense/kernel",
    "pooled_dense/1": "bert/pooler/dense/bias",
}
LAYER_PARTS = {
    "_self_attention_layer/query_dense": "attention/self/query",
    "_self_attention_layer/key_dense": "attention/self/key",
    "_self_attention_layer/value_dense": "attention/self/value",
    "_self_attention_layer/output_dense": "attention/output/dense",
    "_self_attention_layer_norm": "attention/output/LayerNorm",
    "_feedforward_intermediate_dense": "intermediate/dense",
    "_feedforward_output_dense": "output/dense",
    "_feedforward_layer_norm": "output/LayerNorm",
}
KERAS_HUB_POOLING = ("mean", "cls", "max")  # BertTextEmbedder's pooling modes
# The classifier's dense; its kernel is [in, out], run_classifier's output_weights [out, in].
CLASSIFIER_HEAD = {"logits/0": "output_weights", "logits/1": "output_bias"}
# BertMaskedLM's MaskedLMHead (its logits against the tied token embedding) and the
# settings keras-hub builds it with, as `BertPretrainer` arguments.
MASKED_LM_HEAD = {
    "mlm_head/_intermediate_dense/0": "cls/predictions/transform/dense/kernel",
    "mlm_head/_intermediate_dense/1": "cls/predictions/transform/dense/bias",
    "mlm_head/_intermediate_layer_norm/0": "cls/predictions/transform/LayerNorm/gamma",
    "mlm_head/_intermediate_layer_norm/1": "cls/predictions/transform/LayerNorm/beta",
    "mlm_head/0": "cls/predictions/output_bias",
}
KERAS_HUB_MASKED_LM = {"masked_lm_hidden_act": "gelu", "masked_lm_layer_norm_eps": 1e-5}
PRETRAINING = ("BertForMaskedLM", "BertForPreTraining")


def is_keras_hub_preset(folder):
    """Whether `folder` is a Keras preset (model.weights.h5 or metadata.json), read by `read_preset`."""
    folder = Path(folder)
    return (folder / PRESET_WEIGHTS).is_file() or (folder / PRESET_METADATA).is_file()


def backbone_names(num_layers):
    """{.weights.h5 variable: canonical name} of a `BertBackbone` of `num_layers` layers."""
    names = dict(EMBEDDINGS)
    for i in range(num_layers):
        for part, canonical in LAYER_PARTS.items():
            leaves = ("gamma", "beta") if canonical.endswith("LayerNorm") else ("kernel", "bias")
            for index, leaf in enumerate(leaves):
                names[f"transformer_layer_{i}/{part}/{index}"] = f"bert/encoder/layer_{i}/{canonical}/{leaf}"
    return names


def read_preset(folder):
    """What a keras-hub BERT preset holds, as `Checkpoint` fields: the backbone's canonical
    `weights` and `config`; a `BertTextClassifier`'s head (`output_weights`/`output_bias`,
    as run_classifier names them); the `vocab_path` and `vocabulary`; the `tokenizer`
    settings (tokenizer.json's `lowercase`, preprocessor.json's `sequence_length`); a
    `BertMaskedLM`'s head (`cls/predictions/` weights; the head's `masked_lm` settings,
    `KERAS_HUB_MASKED_LM`); and a `BertTextEmbedder`'s pooling and normalisation as
    `embedding`."""
    folder = Path(folder)
    config = _config(folder / PRESET_CONFIG)
    weights = _canonical(_h5_variables(folder / PRESET_WEIGHTS), backbone_names(config.num_hidden_layers), folder)
    task = read_json_object(folder / TASK_CONFIG)
    task_name, task_arguments = task.get("registered_name"), task.get("config") or {}
    head = {"architecture": None, "labels": None, "problem_type": None}
    vocab_path = folder / PRESET_VOCAB
    if not vocab_path.is_file():
        raise FileNotFoundError(f"{folder} has no {PRESET_VOCAB}: not a keras-hub BERT preset with its tokenizer")
    fields = {"vocab_path": vocab_path, "vocabulary": read_vocab(vocab_path), "tokenizer": _tokenizer(folder)}
    if task_name == CLASSIFIER:
        head_weights = _canonical(_h5_variables(folder / TASK_WEIGHTS), CLASSIFIER_HEAD, folder / TASK_WEIGHTS)
        weights["output_weights"] = head_weights["output_weights"].T
        weights["output_bias"] = head_weights["output_bias"]
        head["architecture"] = "BertForSequenceClassification"
        if task_arguments.get("activation") not in (None, "linear"):
            warnings.warn(
                f"{folder / TASK_CONFIG}: the classifier's {task_arguments['activation']} activation is not kept; "
                "bert-keras classifiers output logits",
                stacklevel=3,
            )
    elif task_name == MASKED_LM:
        weights.update(_canonical(_h5_variables(folder / TASK_WEIGHTS), MASKED_LM_HEAD, folder / TASK_WEIGHTS))
        head["architecture"] = "BertForMaskedLM"
        head["masked_lm"] = dict(KERAS_HUB_MASKED_LM)
    elif task_name == TEXT_EMBEDDER:
        fields["embedding"] = {
            "encoder": folder,
            "pooling": task_arguments.get("pooling_mode", "mean"),
            "normalize": bool(task_arguments.get("normalize", True)),
            "prompts": {},
            "max_seq_length": fields["tokenizer"].max_length,
            "lower_case": fields["tokenizer"].lower_case,
        }
    elif task:
        raise ValueError(f"{folder / TASK_CONFIG}: a {task_name} task; bert-keras reads keras-hub's BERT tasks")
    return {"weights": weights, "config": config, "head": head, **fields}


def _config(path):
    """The `BertConfig` of a preset's config.json (a `BertBackbone`'s arguments)."""
    if not path.is_file():
        raise FileNotFoundError(f"no {path.name} in keras-hub preset {path.parent}")
    values = read_json_object(path)
    if values.get("registered_name") != BACKBONE:
        raise ValueError(f"{path}: a {values.get('registered_name')} preset, not a keras-hub BERT one ({BACKBONE})")
    arguments = values.get("config") or {}
    try:
        return BertConfig(
            vocab_size=arguments["vocabulary_size"],
            hidden_size=arguments["hidden_dim"],
            num_hidden_layers=arguments["num_layers"],
            num_attention_heads=arguments["num_heads"],
            intermediate_size=arguments["intermediate_dim"],
            hidden_act="gelu_tanh",
            hidden_dropout_prob=arguments.get("dropout", 0.1),
            attention_probs_dropout_prob=arguments.get("dropout", 0.1),
            max_position_embeddings=arguments.get("max_sequence_length", 512),
            type_vocab_size=arguments.get("num_segments", 2),
        )
    except KeyError as error:
        raise ValueError(f"{path}: the BertBackbone config has no {error}") from None


def _tokenizer(folder):
    tokenizer = read_json_object(folder / PRESET_TOKENIZER).get("config", {})
    preprocessor = read_json_object(folder / PRESET_PREPROCESSOR).get("config", {})
    lower_case = bool(tokenizer["lowercase"]) if "lowercase" in tokenizer else None
    if lower_case:
        warnings.warn(
            f"{folder}: keras-hub's tokenizer lower-cases without stripping accents and bert-keras strips them, "
            "as the original BERT does: a text with accents may split into other pieces than in keras-hub",
            stacklevel=4,
        )
    return TokenizerSettings(lower_case, saved_length(preprocessor, "sequence_length"))


def _h5_variables(path):
    """{variable: array} of a Keras .weights.h5 (see `_layer_datasets`)."""
    import h5py

    if not path.is_file():
        raise FileNotFoundError(f"no {path.name} in keras-hub preset {path.parent}")
    try:
        with h5py.File(path, "r") as file:
            return {variable: dataset[()] for variable, dataset in _layer_datasets(file)}
    except (OSError, KeyError) as error:
        raise ValueError(f"cannot read {path}: not a complete Keras weights file ({error})") from None


def _layer_datasets(file):
    """(variable, dataset) of each weight in an open .weights.h5: `variable` is its top
    layer's name (the file keys layers by class, the name is an attribute), its
    sub-layers' attributes and its index: transformer_layer_0/_self_attention_layer/query_dense/0."""
    import h5py

    found = []
    for key, layer in file["layers"].items():
        layer_name = _text(layer["vars"].attrs.get("name", key)) if "vars" in layer else key

        def collect(inner, item, layer_name=layer_name):
            if isinstance(item, h5py.Dataset):
                found.append(("/".join([layer_name, *(part for part in inner.split("/") if part != "vars")]), item))

        layer.visititems(collect)
    return found


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _canonical(variables, names, source):
    """The canonical weights of `variables` by `names` ({.weights.h5 variable: canonical
    name}): attention kernels [H, heads, size] and [heads, size, H] and biases as 2-D and
    1-D; a variable missing or left over is an error naming `source`."""
    missing = sorted(set(names) - set(variables))
    unexpected = sorted(set(variables) - set(names))
    if missing or unexpected:
        raise ValueError(
            f"{source}: not a keras-hub BERT preset's weights (missing {missing[:4]}, unexpected {unexpected[:4]})"
        )
    return {canonical: _flat(names_key, variables[names_key]) for names_key, canonical in names.items()}


def _flat(key, value):
    if "output_dense" in key and "_self_attention_layer/" in key and value.ndim == 3:
        return value.reshape(-1, value.shape[-1])
    if re.search(r"/(query|key|value)_dense/0$", key):
        return value.reshape(value.shape[0], -1)
    return value.reshape(-1) if key.endswith("/1") and value.ndim > 1 else value


def write_preset(weights, config, path, vocab=None, head=None, tokenizer=None):
    """Writes a keras-hub preset of canonical `weights`: a `BertTextClassifier` for a
    sequence-classification `head` (see `hf.head_config`), a `BertMaskedLM` for the
    pre-training heads' (its next-sentence head left out), a `BertTextEmbedder` for an
    embedder's (`architecture` "BertTextEmbedder", `pooling`, `normalize`), else a
    `BertBackbone` (with a warning naming the head left out); with its `BertTokenizer`
    (`vocab`, a vocab.txt path or the tokens; `tokenizer` the `TokenizerSettings`,
    lower-casing inferred from the vocabulary when unsaid) and a task's preprocessor of
    `tokenizer.max_length` tokens. Needs keras-hub installed."""
    try:
        import keras_hub
    except ImportError:
        raise ValueError("convert --to keras-hub needs keras-hub (pip install 'bert-keras[keras-hub]')") from None
    if vocab is None:
        raise ValueError("a keras-hub preset holds its tokenizer: the model has no vocabulary to write")
    if config.hidden_act != "gelu_tanh":
        warnings.warn(
            f"keras-hub's BertBackbone computes the tanh approximation of GELU, this model {config.hidden_act}: "
            "its outputs in keras-hub differ slightly (as for keras-hub's own BERT presets)",
            stacklevel=3,
        )
    path = Path(path)
    settings = tokenizer or TokenizerSettings()
    lower_case = settings.lower_case if settings.lower_case is not None else infer_lower_case(vocab)
    vocabulary = read_vocab(vocab) if isinstance(vocab, (str, Path)) else list(vocab)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size,
        dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size,
    )
    bert_tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=lower_case)
    sequence_length = settings.max_length or min(512, config.max_position_embeddings)
    task = _task(keras_hub, backbone, bert_tokenizer, sequence_length, head or {}, path)
    if task is None:
        if head or any(re.search(HEAD_NAMES, name) for name in weights):
            warnings.warn(
                f"keras-hub has no {(head or {}).get('architecture') or 'pre-training'} head for bert-keras to "
                f"write: {path} holds the BertBackbone and tokenizer only (keras_hub.models.Backbone.from_preset)",
                stacklevel=3,
            )
        backbone.save_to_preset(str(path))
        bert_tokenizer.save_to_preset(str(path))
    else:
        task.save_to_preset(str(path))
    if isinstance(task, keras_hub.models.BertTextClassifier):
        _write_h5(path / TASK_WEIGHTS, {**weights, "output_weights": weights["output_weights"].T}, CLASSIFIER_HEAD)
    elif isinstance(task, keras_hub.models.BertMaskedLM):
        _write_h5(path / TASK_WEIGHTS, weights, MASKED_LM_HEAD)
    _write_h5(path / PRESET_WEIGHTS, weights, backbone_names(config.num_hidden_layers))


def _task(keras_hub, backbone, tokenizer, sequence_length, head, path):
    """The keras-hub task of a `head` (see `write_preset`), or None when keras-hub has
    none; what the task has no place for is said in a warning."""
    lost = []
    if head.get("architecture") == "BertForSequenceClassification":
        preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=sequence_length)
        task = keras_hub.models.BertTextClassifier(backbone, head["num_labels"], preprocessor=preprocessor)
        lost = [f"labels {head['labels']}"] if head.get("labels") else []
        lost += ["multi-label classification"] if head.get("problem_type") == "multi_label_classification" else []
    elif head.get("architecture") == "BertTextEmbedder" and head["pooling"] in KERAS_HUB_POOLING:
        preprocessor = keras_hub.models.BertTextEmbedderPreprocessor(tokenizer, sequence_length=sequence_length)
        task = keras_hub.models.BertTextEmbedder(
            backbone, preprocessor=preprocessor, pooling_mode=head["pooling"], normalize=head["normalize"]
        )
        lost = ["prompts"] if any(head.get("prompts", {}).values()) else []
    elif head.get("architecture") in PRETRAINING:
        preprocessor = keras_hub.models.BertMaskedLMPreprocessor(tokenizer, sequence_length=sequence_length)
        task = keras_hub.models.BertMaskedLM(backbone, preprocessor=preprocessor)
        lost = ["a next-sentence head"] if head["architecture"] == "BertForPreTraining" else []
    else:
        return None
    if lost:
        name = type(task).__name__
        warnings.warn(f"keras-hub's {name} has no place for {' or '.join(lost)}: {path} is without them", stacklevel=4)
    return task


def _write_h5(path, weights, names):
    """Puts canonical `weights` into the variables `names` lists of the .weights.h5 at
    `path`; a file of other variables (another keras-hub layout) is an error naming it."""
    import h5py

    with h5py.File(path, "r+") as file:
        datasets = _layer_datasets(file)
        unmapped = sorted(set(names) ^ {variable for variable, _ in datasets})
        if unmapped:
            raise ValueError(f"{path}: keras-hub wrote variables bert-keras does not map: {unmapped[:4]}")
        for variable, dataset in datasets:
            dataset[()] = np.asarray(weights[names[variable]]).reshape(dataset.shape).astype(dataset.dtype)
