"""`bert-keras distill` end to end on tiny teachers: a classifier on TSV files (the
student's best.keras is a classifier with the teacher's labels and fewer layers, the
results hold both dev metrics, unlabeled text and augmented copies join the training
set), a token classifier on CoNLL files (conlleval F1 as `finetune conll` scores it), an
embedder on pair files (retrieval as `finetune embedder` scores it); bad input, a
teacher of the wrong kind for the data included, is one line."""

import dataclasses
import json

import keras
import numpy as np
import pytest
from harness import TINY, check_classifier_breakdown, check_tagger_breakdown, tiny_preprocessor
from hub_server import Repo, hub_server, use_hub

from bert_keras import BertClassifier, BertEncoder, BertTextEmbedder, BertTokenClassifier
from bert_keras.datasets import conll, retrieval
from bert_keras.datasets.classification import tsv_data
from bert_keras.datasets.metrics import accuracy
from bert_keras_cli.cli import main

pytestmark = pytest.mark.slow  # most tests here take over 3 CPU-seconds (docs/development.md)

TEXTS = ["the film is good", "the film is bad", "a quick brown fox jumps", "the lazy dog", "it was good !", "bad"]
LABELS = ["good", "bad", "good", "bad", "good", "bad"]
# CoNLL-2003 lines (token POS chunk NER, IOB1 as the files are), words of the tiny vocabulary.
CONLL = (
    "-DOCSTART- -X- -X- O\n\njohn NNP B-NP I-PER\nlives VBZ B-VP O\nin IN B-PP O\nparis NNP B-NP I-LOC\n. . O O\n\n"
    "the DT B-NP O\ndog NN I-NP O\nwas VBD B-VP O\nin IN B-PP O\nparis NNP B-NP I-LOC\n\n"
    "who WP B-NP O\nis VBZ B-VP O\njohn NNP B-NP I-PER\n? . O O\n\n"
)
PAIRS = "anchor\tpositive\nwho is john\tjohn lives in paris\nthe lazy dog\tthe dog was lazy\ngood film\tit was good\n"


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
    tagger = BertTokenClassifier(
        BertEncoder(TINY), len(conll.LABELS), preprocessor=tiny_preprocessor(), labels=list(conll.LABELS)
    )
    tagger.save(folder / "tagger.keras")
    (folder / "conll2003").mkdir()
    for name in ("eng.train", "eng.testa"):
        (folder / "conll2003" / name).write_text(CONLL)
    (folder / "pairs.tsv").write_text(PAIRS)
    teacher.save_checkpoint(folder / "teacher-hf", "hf")
    return folder, teacher


def distill(folder, output, *flags, teacher="teacher.keras", data=None):
    data = data or ["--train", str(folder / "train.tsv"), "--dev", str(folder / "train.tsv")]
    return main(
        [
            "distill",
            "--teacher",
            str(folder / teacher),
            *data,
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
def test_distill_writes_a_smaller_classifier_and_both_metrics(run_files, capsys):
    folder, teacher = run_files
    assert distill(folder, "run", "--student", "teacher:2", "--unlabeled", str(folder / "unlabeled.txt")) == 0
    student = keras.saving.load_model(folder / "run" / "best.keras")
    assert isinstance(student, BertClassifier) and student.labels == ["bad", "good"]
    assert student.encoder.config.num_hidden_layers == 2 and student.segments == ("text",)
    results = json.loads((folder / "run" / "distill_results.json").read_text())
    assert results["training_set"] == 8  # 6 labelled + 2 non-blank unlabeled lines
    assert results["unlabeled_files"] == [str(folder / "unlabeled.txt")] and results["augment_probability"] is None
    labels = [["bad", "good"].index(label) for label in LABELS]
    assert results["teacher"]["accuracy"] == accuracy(labels, teacher.predict(TEXTS, verbose=0).argmax(-1))
    assert results["student"]["accuracy"] == accuracy(labels, student.predict(TEXTS, verbose=0).argmax(-1))
    assert results["student"]["parameters"] < results["teacher"]["parameters"]
    assert (folder / "run" / "labels.txt").read_text() == "bad\ngood\n"
    # The student's evaluation reports and dev predictions, as finetune writes a classifier's.
    dev = tsv_data(folder / "train.tsv", folder / "train.tsv", ["bad", "good"]).devs["train.tsv"]
    logits = student.predict(TEXTS, verbose=0)
    check_classifier_breakdown(folder / "run", ["bad", "good"], dev, logits, best_epoch=1, epochs=1, capsys=capsys)


@pytest.mark.slow
def test_labels_only_and_cached_teacher(run_files):
    folder, _ = run_files
    assert distill(folder, "labels-then-cached", "--labels-only", "--student", "teacher:1") == 0
    assert json.loads((folder / "labels-then-cached" / "distill_results.json").read_text())["alpha"] == 0.0
    # --overwrite replaces the run: the old run's files go first (a stale epoch's logs with them).
    (folder / "labels-then-cached" / "logs" / "stale").mkdir()
    flags = ["--cache-teacher", "--student", "teacher:1", "--overwrite"]
    assert distill(folder, "labels-then-cached", *flags) == 0
    cached = folder / "labels-then-cached"
    assert json.loads((cached / "distill_results.json").read_text())["alpha"] > 0.0
    assert not (cached / "logs" / "stale").exists() and (cached / "best.keras").exists()


@pytest.mark.slow
def test_distill_a_tagger_on_conll(run_files):
    folder, _ = run_files
    data = ["--task", "conll", "--data-dir", str(folder / "conll2003")]
    assert distill(folder, "conll", "--student", "teacher:1", teacher="tagger.keras", data=data) == 0
    student = keras.saving.load_model(folder / "conll" / "best.keras")
    assert isinstance(student, BertTokenClassifier) and student.encoder.config.num_hidden_layers == 1
    assert tuple(student.labels) == conll.LABELS
    results = json.loads((folder / "conll" / "distill_results.json").read_text())
    sentences = conll.read_conll(folder / "conll2003" / "eng.testa")
    teacher = keras.saving.load_model(folder / "tagger.keras")
    for name, model in (("teacher", teacher), ("student", student)):
        predicted = conll.predict_tags(model, sentences, 8)
        expected = conll.conlleval([s.tags for s in sentences], predicted)
        assert {key: results[name][key] for key in ("precision", "recall", "f1", "accuracy")} == pytest.approx(
            {key: expected[key] for key in ("precision", "recall", "f1", "accuracy")}
        )
    assert (folder / "conll" / "labels.txt").read_text().split() == list(conll.LABELS)
    # The student's reports and dev tags (the last `predicted`), as finetune conll writes them.
    lines = (folder / "conll" / "predictions.txt").read_text().split()
    assert lines[2::3] == [tag for tags in predicted for tag in tags]
    check_tagger_breakdown(folder / "conll", sentences, predicted, best_epoch=1)


@pytest.mark.slow
def test_distill_an_embedder_on_pairs(run_files):
    folder, _ = run_files
    data = ["--train", str(folder / "pairs.tsv"), "--dev", str(folder / "pairs.tsv")]
    for run, flags in (("embedder", []), ("embedder-labels", ["--labels-only"])):
        assert distill(folder, run, "--student", "teacher:1", *flags, teacher="embedder.keras", data=data) == 0
        student = keras.saving.load_model(folder / run / "best.keras")
        assert isinstance(student, BertTextEmbedder) and student.encoder.config.num_hidden_layers == 1
        results = json.loads((folder / run / "distill_results.json").read_text())
        rows = [line.split("\t") for line in PAIRS.splitlines()[1:]]
        queries, positives = [a for a, _ in rows], [p for _, p in rows]
        # each anchor's own positive is its one relevant document (all positives differ)
        expected = retrieval.evaluate_retrieval(student.encode(queries), student.encode(positives), [{0}, {1}, {2}])
        assert results["student"]["ndcg@10"] == pytest.approx(expected["ndcg@10"])
        assert results["student"]["recall@1"] == pytest.approx(expected["recall@1"])


def test_bad_input_is_one_line(run_files, capsys):
    folder, _ = run_files
    (folder / "full").mkdir()
    (folder / "full" / "notes.txt").write_text("mine")
    assert distill(folder, "full") == 2
    assert "is not empty" in capsys.readouterr().err
    assert distill(folder, "full", "--overwrite") == 2  # a file no distillation writes is never removed
    assert "holds files no distillation writes (notes.txt)" in capsys.readouterr().err
    assert (folder / "full" / "notes.txt").read_text() == "mine"
    assert distill(folder, "cache", "--cache-teacher", "--hidden-weight", "1") == 2
    assert "--cache-teacher keeps logits only" in capsys.readouterr().err
    (folder / "pairs.txt").write_text("one\ttwo\n")
    assert distill(folder, "pairs", "--unlabeled", str(folder / "pairs.txt")) == 2
    assert "pairs.txt:1: 2 tab-separated text(s); the teacher takes 1" in capsys.readouterr().err
    broken = {
        "empty.txt": b"\n \n",
        "binary.txt": b"\x00\x01\x02",
        "truncated.txt": "a good film\nun bon caf\u00e9".encode()[:-1],
    }
    for name, content in broken.items():
        (folder / name).write_bytes(content)
        assert distill(folder, "broken", "--unlabeled", str(folder / name)) == 2
        assert f"{folder / name}: " in capsys.readouterr().err
    assert distill(folder, "bad-embedder", teacher="embedder.keras") == 2  # a labelled TSV, not pairs
    assert (
        "train.tsv: header ['text', 'label'] lacks column(s) ['text_a', 'text_b', 'score']" in capsys.readouterr().err
    )
    pairs = ["--train", str(folder / "pairs.tsv"), "--dev", str(folder / "pairs.tsv")]
    assert distill(folder, "bad-embedder", "--augment", "1", teacher="embedder.keras", data=pairs) == 2
    assert "--augment: for classifier teachers only" in capsys.readouterr().err
    assert distill(folder, "bad-embedder", teacher="embedder.keras", data=["--task", "sst-2", *pairs]) == 2
    assert "is an embedder: distill it with --train/--dev pair TSVs" in capsys.readouterr().err
    conll_data = ["--task", "conll", "--data-dir", str(folder / "conll2003")]
    assert distill(folder, "bad-conll", data=conll_data) == 2
    assert "--task conll needs a token classifier teacher (finetune conll)" in capsys.readouterr().err
    assert distill(folder, "bad-conll", teacher="tagger.keras") == 2
    assert "is a token classifier: distill it with --task conll --data-dir DIR" in capsys.readouterr().err
    assert distill(folder, "bad-conll", "--unlabeled", str(folder / "unlabeled.txt"), teacher="tagger.keras") == 2
    assert "--unlabeled: for classifier teachers only" in capsys.readouterr().err


@pytest.mark.slow
def test_a_teacher_named_on_the_hub_and_augmented_copies(run_files, tmp_path, monkeypatch, capsys):
    """`--teacher ORG/NAME` downloads the fine-tuned Hugging Face folder, and the run's
    run.json records the repo and the commit it resolved to, as printed; `--augment 2`'s
    copies of the training set join it."""
    folder, teacher = run_files
    files = {path.name: path.read_bytes() for path in (folder / "teacher-hf").iterdir()}
    commit = "3" * 40
    with hub_server({"acme/tiny-sst": Repo({commit: files}, {"main": commit})}) as server:
        use_hub(monkeypatch, tmp_path / "home", server.url)
        data = ["--train", str(folder / "train.tsv"), "--dev", str(folder / "train.tsv"), "--verbose", "0"]
        flags = ["--student", "teacher:1", "--max-train-steps", "1", "--batch-size", "6", "--epochs", "1"]
        flags += ["--augment", "2"]
        flags += ["--output-dir", str(tmp_path / "run")]
        assert main(["distill", "--teacher", "acme/tiny-sst", *flags, *data]) == 0
    assert f"resolved acme/tiny-sst@main to commit {commit}" in capsys.readouterr().out
    results = json.loads((tmp_path / "run" / "distill_results.json").read_text())
    labels = [["bad", "good"].index(label) for label in LABELS]
    assert results["teacher"]["accuracy"] == accuracy(labels, teacher.predict(TEXTS, verbose=0).argmax(-1))
    assert results["training_set"] == 6 + 2 * 6 and results["augment"] == 2
    assert results["augment_probability"] == 0.4 and results["unlabeled_files"] == []
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["teacher"]["repo_id"] == "acme/tiny-sst" and record["teacher"]["commit"] == commit
    assert record["command"][:4] == ["bert-keras", "distill", "--teacher", "acme/tiny-sst"]
    assert keras.saving.load_model(tmp_path / "run" / "best.keras").labels == ["bad", "good"]
