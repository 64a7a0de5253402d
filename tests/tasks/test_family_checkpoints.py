"""DistilBERT and ELECTRA (discriminator) folders in and out: their task heads against
the logits transformers computed for the same folders, their pre-trained encoders
against transformers' hidden states (tests/fixtures/families, written by
tests/fixtures/make_family_references.py), and `convert` back to their own family."""

import json

import numpy as np
import pytest
import tensorflow as tf
from harness import FAMILY_FIXTURES, hf_folder
from safetensors.numpy import load_file

from bert_keras import BertClassifier, BertEncoder, BertSpanLabeler, BertTextEmbedder, BertTokenClassifier
from bert_keras.models.saving import load_keras_file
from bert_keras.serving import deploy
from bert_keras.tasks.checkpoint_models import load_model
from bert_keras_cli.cli import main as cli

REFERENCES = np.load(FAMILY_FIXTURES / "references.npz")
HEADS = {"sequence": BertClassifier, "token": BertTokenClassifier, "question_answering": BertSpanLabeler}
TEXTS = [  # make_task_references.py's
    "the quick brown fox jumps over the lazy dog",
    "a dog runs",
    "who jumps over the dog ?",
    "paris is the capital of france , a country in europe .",
    "berlin is a city",
]
LABELS = {"sequence": ["negative", "neutral", "positive"], "token": ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]}
TASKS = [f"{family}_{task}" for family in ("distilbert", "electra") for task in HEADS]
pytestmark = pytest.mark.filterwarnings("ignore:.*starting them from new initial values")


def task(name):
    return name.split("_", 1)[1]


def folder(tmp_path, name):
    return hf_folder(tmp_path, name, FAMILY_FIXTURES)


def packed(name):
    return {key: REFERENCES[f"{name}/{key}"] for key in ("input_word_ids", "input_mask", "input_type_ids")}


def assert_close(actual, expected, mask):
    """Within 1e-5 of the reference (relative to its largest magnitude) where `mask` is 1."""
    actual, expected = np.asarray(actual) * mask, np.asarray(expected) * mask
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("name", TASKS)
def test_family_heads_give_the_logits_of_transformers_and_convert_back(tmp_path, name):
    """The head, its labels and its logits as transformers'; `convert` to .keras and back
    to hf writes the same tensors under the family's own names, class and config."""
    model = HEADS[task(name)].from_checkpoint(folder(tmp_path, name))
    assert model.labels == LABELS.get(task(name))
    assert model.config.model_type == name.split("_")[0]
    outputs = model(packed(name))
    outputs = outputs if isinstance(outputs, dict) else {"logits": outputs}
    mask = REFERENCES[f"{name}/input_mask"]
    for key, value in outputs.items():
        per_token = {"logits": mask[..., None], "start_logits": mask, "end_logits": mask}[key]
        assert_close(value, REFERENCES[f"{name}/{key}"], 1 if task(name) == "sequence" else per_token)
    if task(name) == "sequence":  # raw text goes through the tokenization of transformers' BertTokenizer
        ids = model.preprocessor(tf.constant(["the quick brown fox jumps over the lazy dog"]))["input_word_ids"]
        expected = REFERENCES[f"{name}/input_word_ids"][0]
        np.testing.assert_array_equal(ids[0, : len(expected)], expected)

    source = folder(tmp_path, name)
    assert cli(["convert", str(source), "--to", "keras", str(tmp_path / "model.keras")]) == 0
    assert cli(["convert", str(tmp_path / "model.keras"), "--to", "hf", str(tmp_path / "back")]) == 0
    original, written = (load_file(str(path / "model.safetensors")) for path in (source, tmp_path / "back"))
    assert written.keys() == original.keys()
    for key in original:
        np.testing.assert_array_equal(written[key], original[key], err_msg=key)
    before, after = (json.loads((path / "config.json").read_text()) for path in (source, tmp_path / "back"))
    sizes = ("dim", "n_layers", "hidden_dim") if name.startswith("distilbert") else ("hidden_size", "embedding_size")
    for field in ("model_type", "architectures", "vocab_size", "id2label", "label2id", *sizes):
        assert after.get(field) == before.get(field), field


@pytest.mark.parametrize("name", ["distilbert_masked_lm", "electra_discriminator"])
def test_pre_trained_checkpoints_load_as_encoders_under_a_new_head(tmp_path, name):
    """DistilBertForMaskedLM and ElectraForPreTraining, what fine-tuning starts from: the
    encoder's output as transformers' last hidden state; a classifier gets a new head."""
    encoder = BertEncoder.from_checkpoint(folder(tmp_path, name))
    mask = REFERENCES[f"{name}/input_mask"][..., None]
    assert_close(encoder(packed(name))["sequence_output"], REFERENCES[f"{name}/sequence_output"], mask)
    architecture = json.loads((folder(tmp_path, name) / "config.json").read_text())["architectures"][0]
    with pytest.warns(UserWarning, match=f"holds a {architecture} head, not a BertClassifier"):
        classifier = BertClassifier.from_checkpoint(folder(tmp_path, name), num_classes=2)
    assert classifier.num_classes == 2 and classifier.labels is None
    classifier.save_checkpoint(tmp_path / "classifier")
    written = json.loads((tmp_path / "classifier/config.json").read_text())
    family = "DistilBert" if name.startswith("distilbert") else "Electra"
    assert written["architectures"] == [f"{family}ForSequenceClassification"]


def test_a_family_model_has_no_tf1_form(tmp_path):
    model = BertClassifier.from_checkpoint(folder(tmp_path, "distilbert_sequence"))
    with pytest.raises(ValueError, match="a distilbert model has no original TF1 bert_config.json"):
        model.save_checkpoint(tmp_path / "tf1", format="tf1")


@pytest.mark.slow
def test_distilbert_fine_tunes_exports_and_predicts(tmp_path):
    """`finetune tsv --init` a DistilBertForMaskedLM folder (a new classifier on its
    encoder), then `export` and `predict` on the export: the labels the Keras model
    gives; `predict` also reads the DistilBertForSequenceClassification folder itself
    with transformers' labels."""
    texts = ["the quick brown fox jumps over the lazy dog", "a dog runs", "berlin is a city", "paris is a city"]
    rows = "".join(f"{text}\t{label}\n" for text, label in zip(texts, ["pos", "neg", "neg", "pos"]))
    for split in ("train", "dev"):
        (tmp_path / f"{split}.tsv").write_text("text\tlabel\n" + rows, encoding="utf-8")
    (tmp_path / "input.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    run = tmp_path / "run"
    finetune = ["finetune", "tsv", "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "dev.tsv")]
    init = ["--init", str(folder(tmp_path, "distilbert_masked_lm")), "--output-dir", str(run)]
    assert (
        cli(
            [
                *finetune,
                *init,
                "--batch-size",
                "2",
                "--max-train-steps",
                "2",
                "--max-seq-length",
                "16",
                "--verbose",
                "0",
            ]
        )
        == 0
    )
    assert cli(["export", str(run / "best.keras"), "--out", str(tmp_path / "export")]) == 0
    assert (
        cli(
            [
                "predict",
                str(tmp_path / "export"),
                "--input",
                str(tmp_path / "input.txt"),
                "--output",
                str(tmp_path / "export.jsonl"),
            ]
        )
        == 0
    )

    model = load_keras_file(run / "best.keras")
    assert model.config.model_type == "distilbert" and model.config.type_vocab_size == 0
    expected = [model.labels[i] for i in np.argmax(model.predict(tf.constant(texts), verbose=0), axis=-1)]
    predicted = [json.loads(line)["label"] for line in (tmp_path / "export.jsonl").read_text().splitlines()]
    assert predicted == expected

    output = tmp_path / "hf.jsonl"
    source = folder(tmp_path, "distilbert_sequence")
    assert cli(["predict", str(source), "--input", str(tmp_path / "input.txt"), "--output", str(output)]) == 0
    reference = np.argmax(REFERENCES["distilbert_sequence/logits"], axis=-1)
    labels = [json.loads(line)["label"] for line in output.read_text().splitlines()]
    assert labels[:2] == [LABELS["sequence"][i] for i in reference[:2]]  # the first two of TEXTS


@pytest.mark.parametrize("name, pooling", [("bge_style", "cls"), ("e5_style", "mean"), ("distilbert_embedder", "mean")])
def test_bert_architecture_embedders_give_the_embeddings_of_sentence_transformers(tmp_path, name, pooling):
    """sentence-transformers folders as BGE ([CLS], normalised), E5 / GTE (mean,
    normalised) and msmarco-distilbert (DistilBERT, mean) publish them."""
    embedder = BertTextEmbedder.from_checkpoint(folder(tmp_path, name))
    assert embedder.pooling == pooling and embedder.normalize
    embeddings = embedder.encode(TEXTS)
    np.testing.assert_allclose(embeddings, REFERENCES[f"{name}/embeddings"], atol=1e-5)


@pytest.mark.slow  # two exports of each format
@pytest.mark.parametrize("name", ["distilbert_sequence", "electra_token"])
def test_family_models_export_to_litert_and_onnx(tmp_path, name):
    """`export --format litert|onnx` of a family folder answers as the Keras model does
    (a LiteRT classifier on raw text through its in-graph tokenizer, others on packed ids)."""
    source = folder(tmp_path, name)
    model = load_model(source)
    packed_texts = model.preprocessor([np.array(TEXTS)])
    want = np.asarray(model(packed_texts, training=False))
    for format, suffix in (("litert", ".tflite"), ("onnx", ".onnx")):
        path = tmp_path / f"{name}{suffix}"
        assert cli(["export", str(source), "--format", format, "--out", str(path)]) == 0
        runtime = deploy.predictor(format, path)
        if format == "litert" and "tokenize" in runtime.signatures:  # a classifier's: raw text in
            inputs = runtime.signatures["serving_default"]["inputs"]
            got = runtime(**{input_name: np.array(TEXTS, dtype=object) for input_name in inputs})
        else:
            got = runtime(**{key: np.asarray(value) for key, value in packed_texts.items()})
        np.testing.assert_allclose(got["logits"], np.reshape(want, got["logits"].shape), atol=deploy.TOLERANCE)
