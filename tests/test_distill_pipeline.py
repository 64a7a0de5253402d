"""`bert-keras distill` end to end on a tiny teacher and TSV files: the student's
best.keras is a classifier with the teacher's labels and fewer layers, the results hold
both dev metrics, unlabeled text joins the training set, and bad input is one line."""

import dataclasses
import json

import keras
import numpy as np
import pytest
from harness import TINY, tiny_preprocessor

from bert_keras import BertClassifier, BertEncoder, BertTextEmbedder
from bert_keras.tasks.glue import accuracy
from pipelines.cli import main

TEXTS = ["the film is good", "the film is bad", "a quick brown fox jumps", "the lazy dog", "it was good !", "bad"]
LABELS = ["good", "bad", "good", "bad", "good", "bad"]


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("distill")
    keras.utils.set_random_seed(0)
    teacher = BertClassifier(
        BertEncoder(dataclasses.replace(TINY, num_hidden_layers=4)),
        2,
        preprocessor=tiny_preprocessor(),
        labels=["bad", "good"],
    )
    teacher.compile(optimizer=keras.optimizers.Adam(1e-3))
    teacher.fit(TEXTS, np.array([["bad", "good"].index(label) for label in LABELS]), batch_size=3, verbose=0)
    teacher.save(folder / "teacher.keras")
    BertTextEmbedder(BertEncoder(TINY), preprocessor=tiny_preprocessor()).save(folder / "embedder.keras")
    (folder / "train.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in zip(TEXTS, LABELS)))
    (folder / "unlabeled.txt").write_text("the dog is good\n\nthe cat jumps\n")
    return folder, teacher


def distill(folder, output, *flags):
    return main(
        [
            "distill",
            "--teacher",
            str(folder / "teacher.keras"),
            "--train",
            str(folder / "train.tsv"),
            "--dev",
            str(folder / "train.tsv"),
            "--output-dir",
            str(folder / output),
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--verbose",
            "0",
            *flags,
        ]
    )


@pytest.mark.slow
def test_distill_writes_a_smaller_classifier_and_both_metrics(run_files):
    folder, teacher = run_files
    assert distill(folder, "run", "--student", "teacher:2", "--unlabeled", str(folder / "unlabeled.txt")) == 0
    student = keras.saving.load_model(folder / "run" / "best.keras")
    assert isinstance(student, BertClassifier) and student.labels == ["bad", "good"]
    assert student.encoder.config.num_hidden_layers == 2 and student.segments == ("text",)
    results = json.loads((folder / "run" / "distill_results.json").read_text())
    assert results["training_set"] == 8  # 6 labelled + 2 non-blank unlabeled lines
    labels = [["bad", "good"].index(label) for label in LABELS]
    assert results["teacher"]["accuracy"] == accuracy(labels, teacher.predict(TEXTS, verbose=0).argmax(-1))
    assert results["student"]["accuracy"] == accuracy(labels, student.predict(TEXTS, verbose=0).argmax(-1))
    assert results["student"]["parameters"] < results["teacher"]["parameters"]
    assert (folder / "run" / "labels.txt").read_text() == "bad\ngood\n"


@pytest.mark.slow
def test_labels_only_and_cached_teacher(run_files):
    folder, _ = run_files
    assert distill(folder, "baseline", "--labels-only", "--student", "teacher:1") == 0
    assert json.loads((folder / "baseline" / "distill_results.json").read_text())["alpha"] == 0.0
    assert distill(folder, "cached", "--cache-teacher", "--student", "teacher:1") == 0


def test_bad_input_is_one_line(run_files, capsys):
    folder, _ = run_files
    (folder / "full").mkdir()
    (folder / "full" / "notes.txt").write_text("mine")
    assert distill(folder, "full") == 2
    assert "is not empty" in capsys.readouterr().err
    assert distill(folder, "cache", "--cache-teacher", "--hidden-weight", "1") == 2
    assert "--cache-teacher keeps logits only" in capsys.readouterr().err
    (folder / "pairs.txt").write_text("one\ttwo\n")
    assert distill(folder, "pairs", "--unlabeled", str(folder / "pairs.txt")) == 2
    assert "pairs.txt:1: 2 tab-separated text(s); the teacher takes 1" in capsys.readouterr().err
    args = ["distill", "--teacher", str(folder / "embedder.keras"), "--train", str(folder / "train.tsv")]
    assert main([*args, "--dev", str(folder / "train.tsv"), "--output-dir", str(folder / "embedder")]) == 2
    assert "distill takes a classifier with its preprocessor" in capsys.readouterr().err
