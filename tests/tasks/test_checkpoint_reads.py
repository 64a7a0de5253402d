"""A checkpoint is read once: `from_checkpoint` opens each file of the folder once (the
JSON settings, vocab.txt, labels.txt, the weights and TF1's `checkpoint` state file),
and `convert` takes every TF1 folder that `from_checkpoint` takes."""

import builtins
import collections
import io
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf
from conftest import REFERENCE, require

from bert_keras import BertClassifier, BertEncoder, BertTextEmbedder
from bert_keras.checkpoint import read_checkpoint
from bert_keras_cli.cli import main as cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"


@pytest.fixture
def opens(monkeypatch):
    """Counts, per real path, every open of a file: Python's `open`, and the readers of
    safetensors and TensorFlow (weights, the TF1 `checkpoint` state file, GFile)."""
    counts = collections.Counter()
    real_open = io.open

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            counts[os.path.realpath(file)] += 1
        return real_open(file, *args, **kwargs)

    def counting(module, name, key):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            counts[os.path.realpath(key(str(args[0])))] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)
    counting(safetensors.numpy, "load_file", lambda path: path)
    counting(tf.train, "load_checkpoint", lambda prefix: prefix + ".index")
    counting(tf.train, "latest_checkpoint", lambda folder: os.path.join(folder, "checkpoint"))
    counting(tf.io.gfile, "GFile", lambda path: path)
    return counts


def opened_in(counts, folder):
    """{file name inside `folder`: times opened}."""
    folder = os.path.realpath(folder)
    return {os.path.relpath(path, folder): n for path, n in counts.items() if path.startswith(folder + os.sep)}


def test_minilm_as_a_classifier_opens_each_file_once(minilm_dir, opens):
    model = BertClassifier.from_checkpoint(minilm_dir, num_classes=3)
    opened = opened_in(opens, minilm_dir)
    assert {"config.json", "tokenizer_config.json", "vocab.txt", "model.safetensors"} <= set(opened), opened
    assert set(opened.values()) == {1}, opened
    assert model.preprocessor.packer.max_seq_length == 512  # tokenizer_config.json's model_max_length
    assert model.preprocessor.tokenizer.lower_case  # its do_lower_case
    assert len(model.preprocessor.tokenizer.vocabulary) == 30522


def test_minilm_as_an_embedder_opens_each_file_once(minilm_dir, opens):
    model = BertTextEmbedder.from_checkpoint(minilm_dir)
    opened = opened_in(opens, minilm_dir)
    assert {"modules.json", "1_Pooling/config.json", "sentence_bert_config.json", "vocab.txt"} <= set(opened)
    assert set(opened.values()) == {1}, opened
    assert (model.pooling, model.normalize, model.preprocessor.packer.max_seq_length) == ("mean", True, 256)


@pytest.fixture
def tf1_classifier(tmp_path):
    """run_classifier's layout: a trained 3-class head, its labels.txt, vocab.txt and the
    `checkpoint` state file, from the BertForSequenceClassification fixture."""
    source = tmp_path / "hf"
    shutil.copytree(FIXTURES / "sequence_single", source)
    shutil.copy(FIXTURES / "vocab.txt", source)
    BertClassifier.from_checkpoint(source).save_checkpoint(tmp_path / "tf1", format="tf1")
    return tmp_path / "tf1"


def test_a_tf1_checkpoint_with_a_head_opens_each_file_once(tf1_classifier, opens):
    model = BertClassifier.from_checkpoint(tf1_classifier)
    opened = opened_in(opens, tf1_classifier)
    expected = {"checkpoint", "bert_model.ckpt.index", "bert_config.json", "vocab.txt", "labels.txt"}
    assert expected <= set(opened), opened
    assert set(opened.values()) == {1}, opened
    assert model.labels == ["negative", "neutral", "positive"] and model.num_classes == 3


def test_the_tiny_pretraining_checkpoint_opens_each_file_once(opens):
    source = require(REFERENCE / "tiny_pretraining_tf1")
    BertEncoder.from_checkpoint(source)
    opened = opened_in(opens, source)
    assert {"checkpoint", "bert_model.ckpt.index", "bert_config.json"} <= set(opened), opened
    assert set(opened.values()) == {1}, opened


def test_read_checkpoint_returns_what_the_folder_holds(tf1_classifier, minilm_dir):
    found = read_checkpoint(tf1_classifier)
    assert (found.format, found.head["labels"], found.head["architecture"]) == (
        "tf1",
        ["negative", "neutral", "positive"],
        None,
    )
    assert found.weights["output_weights"].shape == (3, found.config.hidden_size)
    assert set(found.head_weights) == {"output_weights", "output_bias"}
    assert found.vocabulary == (FIXTURES / "vocab.txt").read_text(encoding="utf-8").split()
    assert read_checkpoint(found) is found
    minilm = read_checkpoint(minilm_dir)
    assert (minilm.format, minilm.head["architecture"], minilm.cross_encoder) == ("hf", "BertModel", False)
    assert (minilm.tokenizer.lower_case, minilm.tokenizer.max_length) == (True, 512)
    assert (minilm.embedding["pooling"], minilm.embedding["max_seq_length"]) == ("mean", 256)


def test_convert_takes_a_tf1_folder_with_a_lone_index_file(tf1_classifier, tmp_path, capsys):
    """Without a `checkpoint` state file the folder's only `*.index` names the checkpoint,
    for `convert` as for `from_checkpoint`."""
    (tf1_classifier / "checkpoint").unlink()
    expected = BertClassifier.from_checkpoint(tf1_classifier)
    assert cli(["convert", str(tf1_classifier), "--to", "keras", str(tmp_path / "model.keras")]) == 0
    assert "BertClassifier" in capsys.readouterr().out
    converted = BertClassifier.from_checkpoint(tmp_path / "model.keras")
    assert converted.labels == expected.labels
    for ours, theirs in zip(converted.weights, expected.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)
