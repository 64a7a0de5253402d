"""Which model a checkpoint holds: the head its Hugging Face `architectures` names (a
sentence-transformers CrossEncoder folder: a reranker), or
the head variables of a TF1 checkpoint (run_squad's, run_classifier's, the pre-training
heads), so `bert-keras convert` moves a task model whole."""

from bert_keras.checkpoint.reader import read_checkpoint
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


def model_class(found):
    """The class of the model a `checkpoint.Checkpoint` of a TF1 checkpoint or Hugging
    Face folder holds."""
    if found.format == "hf":
        if found.cross_encoder:
            return BertReranker
        architecture = found.head["architecture"]
        if architecture in PRETRAINING:
            return BertPretrainer
        return HEADS.get(architecture, BertEncoder)
    if "cls/squad/output_weights" in found.weights:
        return BertSpanLabeler
    if "output_weights" in found.weights:
        return BertClassifier
    if any(name.startswith("cls/predictions/") for name in found.weights):
        return BertPretrainer
    return BertEncoder


def load_model(path, format=None):
    """The whole model of any checkpoint, read once: a `.keras` file as saved; an
    encoder, pre-training model or task head (with its labels, and a preprocessor when a
    vocab.txt is beside the weights) from a TF1 checkpoint or Hugging Face folder."""
    found = read_checkpoint(path, format)
    if found.format == "keras":
        return load_keras_file(found.path)
    cls = model_class(found)
    if cls in (BertEncoder, BertPretrainer):
        return cls.from_checkpoint(found)
    return cls.from_checkpoint(found, preprocessor=found.vocabulary is not None)
