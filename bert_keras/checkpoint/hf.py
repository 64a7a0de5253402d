"""Hugging Face folders: `config.json` (with `architectures`, `id2label`, `problem_type`
for a BertFor* head) and `model.safetensors`, whose names and [out, in] Linear weights
translate to and from the canonical form. No PyTorch: safetensors only.

DistilBERT and ELECTRA folders go through BERT's names: their own names are renamed to
BERT's on reading (`FAMILY_READ_NAMES`) and back on writing (`FAMILY_WRITE_NAMES`), and
their classes (`DistilBertForSequenceClassification`, ...) stand for the BertFor* ones."""

import json
import re
from pathlib import Path

import numpy as np

from bert_keras.checkpoint.text_files import VOCAB, write_tokenizer_config, write_vocab
from bert_keras.checkpoint.weights import POOLER_NAMES

HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"
# A model saved in shards (save_pretrained's max_shard_size): the index maps each tensor
# to its shard file (model-00001-of-00002.safetensors, ...).
HF_WEIGHTS_INDEX = "model.safetensors.index.json"
# Hugging Face entries that duplicate or derive from other weights (the tied decoder is
# checked against the word embeddings by `read_hf_weights`).
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
# The BertFor* classes that have no pooler.
HF_WITHOUT_POOLER = ("BertForTokenClassification", "BertForQuestionAnswering", "BertForMaskedLM")
# Each family's class-name stem (`DistilBertModel`, `ElectraForTokenClassification`).
FAMILY_CLASSES = {"bert": "Bert", "distilbert": "DistilBert", "electra": "Electra"}
# The classes of the other families read as their BertFor* counterparts; the only ones of
# theirs that have a pooler (BERT's, there the classifier's dense layer) classify sequences.
FAMILY_HEADS = ("Model", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")
# Names (the encoder's prefix removed) -> BERT's: DistilBERT's layers, classifier dense
# (BERT's pooler) and masked-LM head; ELECTRA's classifier and discriminator head.
FAMILY_READ_NAMES = {
    "distilbert": [
        (r"^transformer\.", "encoder."),
        (r"\.attention\.q_lin\.", ".attention.self.query."),
        (r"\.attention\.k_lin\.", ".attention.self.key."),
        (r"\.attention\.v_lin\.", ".attention.self.value."),
        (r"\.attention\.out_lin\.", ".attention.output.dense."),
        (r"\.sa_layer_norm\.", ".attention.output.LayerNorm."),
        (r"\.ffn\.lin1\.", ".intermediate.dense."),
        (r"\.ffn\.lin2\.", ".output.dense."),
        (r"\.output_layer_norm\.", ".output.LayerNorm."),
        (r"^pre_classifier\.", "pooler.dense."),
        (r"^vocab_transform\.", "cls.predictions.transform.dense."),
        (r"^vocab_layer_norm\.", "cls.predictions.transform.LayerNorm."),
        (r"^vocab_projector\.bias$", "cls.predictions.bias"),
        (r"^vocab_projector\.weight$", "cls.predictions.decoder.weight"),
    ],
    "electra": [
        (r"^classifier\.dense\.", "pooler.dense."),
        (r"^classifier\.out_proj\.", "classifier."),
        (r"^discriminator_predictions\.dense\.", "cls.discriminator.dense."),
        (r"^discriminator_predictions\.dense_prediction\.", "cls.discriminator.output."),
    ],
}
# BERT's names (no prefix) -> the family's, for the classes `FAMILY_HEADS` lists; the
# attention's renames come before the output's, whose names end theirs.
FAMILY_WRITE_NAMES = {
    "distilbert": [
        (r"^encoder\.", "transformer."),
        (r"\.attention\.self\.query\.", ".attention.q_lin."),
        (r"\.attention\.self\.key\.", ".attention.k_lin."),
        (r"\.attention\.self\.value\.", ".attention.v_lin."),
        (r"\.attention\.output\.dense\.", ".attention.out_lin."),
        (r"\.attention\.output\.LayerNorm\.", ".sa_layer_norm."),
        (r"\.intermediate\.dense\.", ".ffn.lin1."),
        (r"\.output\.dense\.", ".ffn.lin2."),
        (r"\.output\.LayerNorm\.", ".output_layer_norm."),
        (r"^pooler\.dense\.", "pre_classifier."),
    ],
    "electra": [(r"^pooler\.dense\.", "classifier.dense.")],
}
# ...and in a sequence classifier's: ELECTRA's output layer is `classifier.out_proj`.
FAMILY_SEQUENCE_WRITE_NAMES = {"electra": [(r"^classifier\.(weight|bias)$", r"classifier.out_proj.\1")]}


def renamed(name, renames):
    """`name` with each (pattern, replacement) of `renames` applied in turn."""
    for pattern, replacement in renames:
        name = re.sub(pattern, replacement, name)
    return name


def family_architecture(architecture, model_type):
    """A BertFor* class name as the family of `model_type` names it (`DistilBertModel`)."""
    return FAMILY_CLASSES[model_type] + architecture.removeprefix("Bert")


def bert_architecture(architecture, model_type):
    """A family's class read as the BertFor* one it stands for; others as they are."""
    suffix = architecture.removeprefix(FAMILY_CLASSES[model_type]) if architecture else None
    return "Bert" + suffix if suffix in FAMILY_HEADS else architecture


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


def has_hf_weights(folder):
    """Whether a folder holds Hugging Face weights: model.safetensors or a sharded index."""
    return (Path(folder) / HF_WEIGHTS).exists() or (Path(folder) / HF_WEIGHTS_INDEX).exists()


def read_hf_weights(folder, model_type="bert"):
    """The canonical weights of a folder's model.safetensors, or of the shards its
    model.safetensors.index.json names, of a `model_type` family."""
    folder = Path(folder)
    path = folder / HF_WEIGHTS
    if path.exists() or not (folder / HF_WEIGHTS_INDEX).exists():
        tensors = _read_safetensors(path)
    else:
        path = folder / HF_WEIGHTS_INDEX
        tensors = {}
        for shard in _shard_files(path):
            tensors.update(_read_safetensors(folder / shard))
    prefix, renames = f"{model_type}.", FAMILY_READ_NAMES.get(model_type, ())
    tensors = {renamed(name.removeprefix(prefix), renames): value for name, value in tensors.items()}
    weights = {}
    for hf_name, value in tensors.items():
        if HF_IGNORED.search(hf_name):
            continue
        name, transpose = hf_to_original(hf_name)
        weights[name] = value.T if transpose else value
    _check_decoder(tensors, weights, path)
    return weights


def _read_safetensors(path):
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, TypeError, ValueError, OSError) as error:
        raise ValueError(f"cannot read {path}: {' '.join(str(error).split())}") from None


def _shard_files(index):
    """The shard files a model.safetensors.index.json's weight_map names, in order."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{index}: not a safetensors index with a weight_map ({error})") from None
    if not shards or any("/" in shard or "\\" in shard for shard in shards):
        raise ValueError(f"{index}: the weight_map must name shard files beside it, got {shards}")
    return shards


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


def hf_head(values, source):
    """What a config.json's `values` say of the task head: a dict with `architecture`
    (the first `architectures`, a DistilBERT or ELECTRA class as its BertFor*), `labels`
    (from `id2label`; None when absent or the defaults LABEL_0, ...) and `problem_type`;
    `source` names the file in errors."""
    id2label = values.get("id2label") or {}
    try:
        ids = sorted(int(key) for key in id2label)
    except ValueError:
        raise ValueError(f"{source}: id2label keys must be integers, got {sorted(id2label)}") from None
    if ids != list(range(len(ids))):
        raise ValueError(f"{source}: id2label must number the labels 0..{len(ids) - 1}, got {ids}")
    labels = [str(id2label[str(i)]) for i in ids] or None
    if labels == [f"LABEL_{i}" for i in range(len(ids))]:
        labels = None
    architectures = values.get("architectures") or [None]
    architecture = bert_architecture(architectures[0], values.get("model_type", "bert"))
    return {"architecture": architecture, "labels": labels, "problem_type": values.get("problem_type")}


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


def hf_architecture(weights, head):
    """The BertFor* class a folder of `weights` is written as: the head's, else
    BertForPreTraining / BertForMaskedLM with pre-training heads, else BertModel."""
    if head:
        return head["architecture"]
    if any(name.startswith("cls/seq_relationship/") for name in weights):
        return "BertForPreTraining"
    if any(name.startswith("cls/") for name in weights):
        return "BertForMaskedLM"
    return "BertModel"


def write_hf(weights, config, path, vocab=None, head=None, tokenizer=None):
    """Writes `config.json` + `model.safetensors` (+ vocab, and tokenizer_config.json for
    the `TokenizerSettings` `tokenizer`) that transformers loads.

    `head` (see `head_config`) names the task model's BertFor* class and its labels;
    without one, `hf_architecture` picks the class. The masked-LM decoder weight is tied
    to the word embeddings, so it is not stored; classes without a pooler get none. A
    DistilBERT or ELECTRA model (`config.model_type`) is written in its family's names.
    """
    from safetensors.numpy import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    architecture = hf_architecture(weights, head)
    family = config.model_type
    if family != "bert" and architecture.removeprefix("Bert") not in FAMILY_HEADS:
        raise ValueError(
            f"a {family} model is written as {[family_architecture('Bert' + h, family) for h in FAMILY_HEADS]}, "
            f"not as {family_architecture(architecture, family)}"
        )
    pooled = (
        architecture == "BertForSequenceClassification" if family != "bert" else architecture not in HF_WITHOUT_POOLER
    )
    prefix = "" if architecture == "BertModel" else f"{family}."
    tensors = {}
    for name, value in weights.items():
        if not pooled and re.search(POOLER_NAMES, name):
            continue
        hf_name, transpose = original_to_hf(name, prefix)
        if family != "bert":
            encoder = hf_name.startswith(prefix) and not re.search(POOLER_NAMES, name)
            renames = FAMILY_WRITE_NAMES[family] + (FAMILY_SEQUENCE_WRITE_NAMES.get(family, []) if pooled else [])
            hf_name = renamed(hf_name.removeprefix(prefix), renames)
            hf_name = prefix + hf_name if encoder else hf_name
        tensors[hf_name] = np.ascontiguousarray(value.T if transpose else value)
    save_file(tensors, str(path / HF_WEIGHTS), metadata={"format": "pt"})
    architecture = family_architecture(architecture, family)
    hf_config = {**config.to_hf_dict(), "architectures": [architecture], **head_config(head)}
    (path / HF_CONFIG).write_text(json.dumps(hf_config, indent=2) + "\n")
    if vocab is not None:
        write_vocab(vocab, path / VOCAB)
    if tokenizer is not None:
        write_tokenizer_config(path, tokenizer.lower_case, tokenizer.max_length)
