"""Which model a checkpoint holds: the head its Hugging Face `architectures` names (a
sentence-transformers CrossEncoder folder: a reranker), or
the head variables of a TF1 checkpoint (run_squad's, run_classifier's, the pre-training
heads), so `bert-keras convert` moves a task model whole; `load_model`, the one
loader of a whole model that every command (`predict`, `export`, `convert`) calls, and
`save_model`, its counterpart (`convert`, `push`), which gives a Hugging Face folder
its model card."""

from pathlib import Path

from bert_keras.checkpoint.model_card import write_model_card
from bert_keras.checkpoint.reader import is_keras_file, read_checkpoint
from bert_keras.checkpoint.sentence_transformers import ST_MODULES
from bert_keras.models.encoder import BertEncoder
from bert_keras.models.pretrainer import BertPretrainer
from bert_keras.models.saving import load_keras_file, save_checkpoint
from bert_keras.tasks.classifier import BertClassifier
from bert_keras.tasks.multiple_choice import BertMultipleChoice
from bert_keras.tasks.reranker import BertReranker
from bert_keras.tasks.span_labeler import BertSpanLabeler
from bert_keras.tasks.task import BertTask
from bert_keras.tasks.text_embedder import BertTextEmbedder
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


def load_model(path, format=None, cls=None, headless=BertEncoder):
    """The whole model at `path`, read once, by the same rules for every command: a
    `.keras` file as saved; from a TF1 checkpoint or Hugging Face folder, a `cls` (default:
    the model it holds, `model_class`; `headless` when that is a bare encoder, e.g. a
    `BertTextEmbedder`) with its labels, and a preprocessor when a vocab.txt is beside the
    weights. A missing, empty, truncated or foreign file or folder, or a SavedModel export
    (which only `predict` reads, before it comes here), is a ValueError naming it."""
    if (Path(path) / "saved_model.pb").is_file():
        raise ValueError(f"{path} is a SavedModel export; give the .keras file or checkpoint it was exported from")
    try:
        found = read_checkpoint(path, format)
        if found.format == "keras":
            return load_keras_file(found.path)
    except FileNotFoundError as error:
        raise ValueError(f"{path} is not a model (.keras file or checkpoint folder): {error}") from None
    cls = cls or model_class(found)
    cls = headless if cls is BertEncoder else cls
    if cls is BertTextEmbedder:
        # A sentence-transformers folder whose modules this read passed over is read again
        # by the embedder's own strict reader, which names what it cannot run.
        unread = found.embedding is None and (Path(path) / ST_MODULES).is_file()
        return cls.from_checkpoint(path if unread else found)
    if cls in (BertEncoder, BertPretrainer):
        return cls.from_checkpoint(found)
    return cls.from_checkpoint(found, preprocessor=found.vocabulary is not None)


def save_model(model, path, format, source=None, repo_id=None):
    """Writes `model` (as `load_model` returns it) in `format` ('keras', 'hf' or 'tf1'),
    its head and labels included. A Hugging Face folder gets its README.md model card,
    with what the run that trained the model recorded beside `source` (the .keras file
    or folder it was loaded from; `checkpoint.model_card.read_run`); `repo_id` names the
    Hub repo in the card's examples."""
    if isinstance(model, BertTask):
        model.save_checkpoint(path, format)
    else:
        save_checkpoint(model, path, format)
    if format == "hf":
        run_folder = None if source is None else Path(source).parent if is_keras_file(source) else Path(source)
        write_model_card(path, model, run_folder, repo_id)
