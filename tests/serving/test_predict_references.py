"""`predict` against transformers on real texts: the tiny Hugging Face folders of
tests/fixtures/tasks (and predict/token), SST-2, CoNLL-2003 and SQuAD dev texts, and what
transformers' pipelines (and PyTorch's logits) answer for them, in
tests/fixtures/predict/references.json (`make_predict_references.py`)."""

import json
import shutil

import numpy as np
import pytest
from conftest import DATA, require
from harness import FIXTURES, TASK_FIXTURES, hf_folder

from bert_keras.serving.batch import PredictOptions, predict_files

REFERENCES = json.loads((FIXTURES / "predict" / "references.json").read_text(encoding="utf-8"))


def source(task):
    return require(DATA / REFERENCES["sources"][task])


def run_predict(tmp_path, model, rows, **options):
    """`predict_files` of `model` on `rows` (dicts of texts) through a .jsonl file: the records."""
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    predict_files(str(model), [str(inputs)], tmp_path / "out.jsonl", PredictOptions(**options))
    return [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]


def test_classifier_scores_equal_the_text_classification_pipeline(tmp_path):
    lines = source("classification").read_text(encoding="utf-8").splitlines()
    cases = REFERENCES["classification"]
    texts = [lines[case["line"] - 1].split("\t")[0] for case in cases]
    records = run_predict(
        tmp_path, hf_folder(tmp_path, "sequence_single"), [{"text": t} for t in texts], all_scores=True
    )
    for record, case in zip(records, cases):
        assert record["label"] == max(case["scores"], key=case["scores"].get)
        assert record["scores"].keys() == case["scores"].keys()
        for label, score in case["scores"].items():
            assert record["scores"][label] == pytest.approx(score, abs=1e-5)


@pytest.mark.slow
def test_tagger_entities_equal_the_token_classification_pipeline(tmp_path):
    lines = source("ner").read_text(encoding="utf-8").splitlines()
    cases = REFERENCES["ner"]
    texts = [
        " ".join(line.split()[0] for line in lines[first - 1 : last]) for first, last in (c["lines"] for c in cases)
    ]
    model = tmp_path / "token"
    shutil.copytree(FIXTURES / "predict" / "token", model)
    shutil.copy(TASK_FIXTURES / "vocab.txt", model)
    records = run_predict(tmp_path, model, [{"text": t} for t in texts])
    for record, case, text in zip(records, cases, texts):
        ours = [(e["entity"], e["start"], e["end"]) for e in record["entities"]]
        assert ours == [(e["entity"], e["start"], e["end"]) for e in case["entities"]], text
        assert [e["text"] for e in record["entities"]] == [text[e["start"] : e["end"]] for e in case["entities"]]
        np.testing.assert_allclose(
            [e["score"] for e in record["entities"]], [e["score"] for e in case["entities"]], atol=1e-5, rtol=0
        )


def test_span_answers_equal_pytorch_s_best_span(tmp_path):
    data = json.loads(source("question_answering").read_text(encoding="utf-8"))["data"]
    cases, rows = REFERENCES["question_answering"], []
    for case in cases:
        article, paragraph, question = case["squad"]
        paragraph = data[article]["paragraphs"][paragraph]
        rows.append(
            {"question": paragraph["qas"][question]["question"], "context": paragraph["context"][: case["context_end"]]}
        )
    records = run_predict(tmp_path, hf_folder(tmp_path, "question_answering"), rows)
    for record, case, row in zip(records, cases, rows):
        assert (record["start"], record["end"]) == (case["start"], case["end"]), row
        assert record["answer"] == row["context"][case["start"] : case["end"]]
        assert record["score"] == pytest.approx(case["logit_score"], abs=1e-5)
