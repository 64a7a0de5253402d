"""The official metrics against their reference implementations, on crafted inputs.

Expected numbers are what the reference programs print for these inputs (run outside
the test suite, which holds none of their code):
- conlleval: the CoNLL-2000/2003 `conlleval` perl script (version 2004-01-26), e.g.
  kyzhouhzau/BERT-NER conlleval.pl, `perl conlleval.pl < data/conlleval_crafted.txt`.
- SQuAD: the official `evaluate-v1.1.py` (as in deeppavlov/stand_squad_en
  evaluate-v1.1.py; google-research/bert's README scores run_squad.py's
  predictions.json with it) on `SQUAD_DATASET` / `SQUAD_PREDICTIONS` below.
- GLUE: MCC is the phi coefficient, i.e. Pearson's r of the two binary vectors
  (the formula sklearn.metrics.matthews_corrcoef documents), checked with scipy.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from bert_keras.datasets.conll import conlleval
from bert_keras.datasets.glue import glue_metrics
from bert_keras.datasets.metrics import accuracy, f1, matthews_corrcoef
from bert_keras.datasets.squad import read_squad
from bert_keras.datasets.squad_scoring import evaluate

DATA = Path(__file__).resolve().parent / "data"


def test_conlleval_equals_the_perl_script_on_a_crafted_file():
    """IOB1 and IOB2 mixed, I- after O, type changes inside an entity, entities at a
    sentence end and one continuing (as I-) after a sentence boundary."""
    blocks = [block for block in (DATA / "conlleval_crafted.txt").read_text().split("\n\n") if block.strip()]
    rows = [[line.split(" ") for line in block.splitlines()] for block in blocks]
    result = conlleval([[r[1] for r in rows_] for rows_ in rows], [[r[2] for r in rows_] for rows_ in rows])
    # perl: "processed 28 tokens with 12 phrases; found: 13 phrases; correct: 5."
    assert result["precision"] == pytest.approx(5 / 13) and result["recall"] == pytest.approx(5 / 12)
    # perl: "accuracy:  71.43%; precision:  38.46%; recall:  41.67%; FB1:  40.00"
    assert round(100 * result["accuracy"], 2) == 71.43 and round(100 * result["f1"], 2) == 40.00
    per_type = {
        kind: tuple(round(100 * s[m], 2) for m in ("precision", "recall", "f1"))
        for kind, s in result["per_type"].items()
    }
    assert per_type == {  # perl's per-type lines
        "LOC": (20.00, 20.00, 20.00),
        "MISC": (33.33, 33.33, 33.33),
        "ORG": (66.67, 100.00, 80.00),
        "PER": (50.00, 50.00, 50.00),
    }


SQUAD_DATASET = {
    "version": "1.1",
    "data": [
        {
            "title": "t",
            "paragraphs": [
                {
                    "context": "x",
                    "qas": [
                        {
                            "id": "a",
                            "question": "q",
                            "answers": [
                                {"text": "the Denver Broncos", "answer_start": 0},
                                {"text": "Denver Broncos", "answer_start": 0},
                            ],
                        },
                        {
                            "id": "b",
                            "question": "q",
                            "answers": [{"text": "Santa Clara, California", "answer_start": 0}],
                        },
                        {
                            "id": "c",
                            "question": "q",
                            "answers": [
                                {"text": "gold coin", "answer_start": 0},
                                {"text": "a gold coin!", "answer_start": 0},
                            ],
                        },
                        {"id": "d", "question": "q", "answers": [{"text": "Über café", "answer_start": 0}]},
                        {"id": "e", "question": "q", "answers": [{"text": "the the the", "answer_start": 0}]},
                        {"id": "f", "question": "q", "answers": [{"text": "Levi's Stadium", "answer_start": 0}]},
                        {"id": "g", "question": "q", "answers": [{"text": "1 2 2 3", "answer_start": 0}]},
                    ],
                }
            ],
        }
    ],
}
# "f" is unanswered (scores 0, still counted); "e" normalises to "" on both sides.
SQUAD_PREDICTIONS = {
    "a": "Denver Broncos.",
    "b": "Clara California in the bay",
    "c": "the gold",
    "d": "über CAFÉ",
    "e": "",
    "g": "2 2 2 1",
}


def test_squad_em_f1_equal_the_official_v1_1_script(tmp_path):
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(SQUAD_DATASET), encoding="utf-8")
    result = evaluate(read_squad(path), SQUAD_PREDICTIONS)
    # evaluate-v1.1.py prints {"exact_match": 42.857142857142854, "f1": 56.97278911564626}
    assert result["exact_match"] == pytest.approx(42.857142857142854, abs=1e-12)
    assert result["f1"] == pytest.approx(56.97278911564626, abs=1e-12)


def test_glue_classification_metrics_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 300)
    predictions = np.where(rng.random(300) < 0.7, labels, 1 - labels)
    assert matthews_corrcoef(labels, predictions) == pytest.approx(
        stats.pearsonr(labels, predictions).statistic, abs=1e-12
    )
    assert accuracy(labels, predictions) == pytest.approx(np.mean(labels == predictions))
    # F1 of class 1: the harmonic mean of precision and recall (scipy.stats.hmean).
    tp = np.sum((labels == 1) & (predictions == 1))
    expected = stats.hmean([tp / np.sum(predictions == 1), tp / np.sum(labels == 1)])
    assert f1(labels, predictions) == pytest.approx(expected, abs=1e-12)
    assert glue_metrics("mrpc", labels, predictions) == {
        "accuracy": pytest.approx(accuracy(labels, predictions)),
        "f1": pytest.approx(expected, abs=1e-12),
    }
