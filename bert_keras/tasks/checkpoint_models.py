"""Which model a checkpoint holds: the head its Hugging Face `architectures` names (a
sentence-transformers CrossEncoder folder: a reranker), or
the head variables of a TF1 checkpoint (run_squad's, run_classifier's, the pre-training
heads), so `bert-keras convert` moves a task model whole."""

from pathlib import Path

import tensorflow as tf

from bert_keras import checkpoint
from bert_keras.models.encoder import BertEncoder
from bert_keras.models.pretrainer import BertPretrainer
from bert_keras.models.saving import load_keras_file
from bert_keras.tasks.classifier import BertClassifier
from bert_keras.tasks.multiple_choice import BertMultipleChoice
from bert_keras.tasks.reranker import BertReranker
from bert_keras.tasks.span_labeler import BertSpanLabeler
from bert_keras.tasks.token_classifier import BertTokenClassifier

HEADS = {cls.hf_architecture: cls for cls in (BertClassifier, BertTokenClassifier, BertSpanLabeler, BertMultipleChoice)}
PRETRAINING = ("BertForPreTraining", "BertForMaskedLM")


def model_class(path, format=None):
    """The class of the model a TF1 checkpoint or Hugging Face folder holds."""
    format = format or checkpoint.detect_format(path)
    if format == "hf":
        if checkpoint.is_cross_encoder(path):
            return BertReranker
        architecture = checkpoint.read_head(path, format)["architecture"]
        if architecture in PRETRAINING:
            return BertPretrainer
        return HEADS.get(architecture, BertEncoder)
    path = Path(path)
    prefix = tf.train.latest_checkpoint(str(path)) if path.is_dir() else str(path)
    names = {name for name, _ in tf.train.list_variables(prefix or str(path))}
    if "cls/squad/output_weights" in names:
        return BertSpanLabeler
    if "output_weights" in names:
        return BertClassifier
    if any(name.startswith("cls/predictions/") for name in names):
        return BertPretrainer
    return BertEncoder


def load_model(path, format=None):
    """The whole model of any checkpoint: a `.keras` file as saved; an encoder,
    pre-training model or task head (with its labels, and a preprocessor when a
    vocab.txt is beside the weights) from a TF1 checkpoint or Hugging Face folder."""
    format = format or checkpoint.detect_format(path)
    if format == "keras":
        return load_keras_file(path)
    cls = model_class(path, format)
    if cls in (BertEncoder, BertPretrainer):
        return cls.from_checkpoint(path, format=format)
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    return cls.from_checkpoint(path, format=format, preprocessor=(folder / checkpoint.VOCAB).exists())
