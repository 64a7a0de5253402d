"""`bert-keras predict` and `bert_keras.serving.batch`: every supported head's records
equal what the model itself predicts on the same texts, through `.keras` files and
checkpoint folders; inputs of each kind; a run killed with SIGKILL resumes to the same
output; bad input is a one-line error or, with --on-error skip, an error record."""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from doc_blocks import block_run_by
from harness import hf_folder, tiny_embedder_folder, tiny_encoder, tiny_preprocessor

from bert_keras import BertClassifier, BertTextEmbedder, BertTokenClassifier
from bert_keras.models.dtype import with_dtype
from bert_keras.serving.batch import PredictOptions, load_model, predict_files, writers
from bert_keras.serving.batch.runner import predictor_for
from bert_keras.serving.export import serving_preprocessor
from bert_keras.tasks.task import with_windows
from bert_keras.tasks.windowing import truncated_pieces
from bert_keras_cli.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["the quick brown fox", "", "a dog in paris , france", "berlin is a city in europe", "the fox"]
PAIRS = [("what is the capital", "paris is the capital of france"), ("a dog", "the fox jumps"), ("", "berlin")]


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def write_text(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def write_tsv(path, header, rows):
    return write_text(path, ["\t".join(header)] + ["\t".join(row) for row in rows])


def softmax(logits):
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("models")
    names = ("sequence_single", "sequence_multi", "sequence_regression", "cross_encoder", "token")
    return {name: hf_folder(base, name) for name in (*names, "question_answering", "multiple_choice")}


@pytest.mark.slow
def test_classifier_records_equal_model_predict(tmp_path, folders, classifier_keras):
    texts = write_text(tmp_path / "in.txt", TEXTS)
    for source in (folders["sequence_single"], classifier_keras):
        out = tmp_path / f"{Path(source).name}.jsonl"
        summary = predict_files(
            str(source), [str(texts)], out, PredictOptions(all_scores=True, batch_size=2), chunk_size=3
        )
        model = load_model(source)
        probabilities = softmax(np.asarray(model.predict(np.array(TEXTS, dtype=object), verbose=0)))
        records = read_jsonl(out)
        assert summary["rows"] == len(TEXTS) and summary["errors"] == 0
        assert [r["id"] for r in records] == [f"{texts}:{i}" for i in range(1, len(TEXTS) + 1)]
        assert [r["label"] for r in records] == [model.labels[i] for i in probabilities.argmax(-1)]
        scores = np.array([[r["scores"][label] for label in model.labels] for r in records])
        np.testing.assert_allclose(scores, probabilities, atol=1e-5, rtol=0)
        np.testing.assert_allclose([r["probability"] for r in records], probabilities.max(-1), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_pair_classifier_reads_its_trained_segments(tmp_path):
    model = BertClassifier(
        tiny_encoder(), num_classes=2, preprocessor=tiny_preprocessor(), segments=("premise", "hypothesis")
    )
    model.save(tmp_path / "pair.keras")
    table = write_tsv(tmp_path / "in.tsv", ("premise", "hypothesis"), PAIRS)
    predict_files(str(tmp_path / "pair.keras"), [str(table)], tmp_path / "out.jsonl", PredictOptions(all_scores=True))
    premises, hypotheses = (np.array(column, dtype=object) for column in zip(*PAIRS))
    expected = softmax(np.asarray(model.predict((premises, hypotheses), verbose=0)))
    scores = [[r["scores"]["0"], r["scores"]["1"]] for r in read_jsonl(tmp_path / "out.jsonl")]
    np.testing.assert_allclose(scores, expected, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_multi_label_and_regression_records(tmp_path, folders):
    texts = write_text(tmp_path / "in.txt", TEXTS)
    multi = load_model(folders["sequence_multi"])
    predict_files(multi, [str(texts)], tmp_path / "multi.jsonl")
    probabilities = 1 / (1 + np.exp(-np.asarray(multi.predict(np.array(TEXTS, dtype=object), verbose=0))))
    records = read_jsonl(tmp_path / "multi.jsonl")
    scores = np.array([[r["scores"][label] for label in multi.labels] for r in records])
    np.testing.assert_allclose(scores, probabilities, atol=1e-5, rtol=0)
    assert [r["labels"] for r in records] == [[n for n, p in zip(multi.labels, row) if p > 0.5] for row in scores]
    regression = load_model(folders["sequence_regression"])
    predict_files(regression, [str(texts)], tmp_path / "score.tsv")
    lines = (tmp_path / "score.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "id\tscore"
    expected = np.asarray(regression.predict(np.array(TEXTS, dtype=object), verbose=0))[:, 0]
    np.testing.assert_allclose([float(line.split("\t")[1]) for line in lines[1:]], expected, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_reranker_reads_named_columns_and_ids(tmp_path, folders):
    rows = [(f"q{i}", query, document) for i, (query, document) in enumerate(PAIRS)]
    table = write_tsv(tmp_path / "pairs.tsv", ("key", "question", "passage"), rows)
    out = tmp_path / "scores.jsonl"
    status = cli(
        [
            "predict",
            str(folders["cross_encoder"]),
            "--input",
            str(table),
            "--output",
            str(out),
            *("--column", "query=question", "--column", "document=passage", "--id-column", "key"),
        ]
    )
    assert status == 0
    model = load_model(folders["cross_encoder"])
    expected = model.predict(PAIRS, verbose=0)
    records = read_jsonl(out)
    assert [r["id"] for r in records] == ["q0", "q1", "q2"]
    np.testing.assert_allclose([r["score"] for r in records], expected, atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def embedder_folder(tmp_path_factory):
    """A sentence-transformers folder of a tiny embedder."""
    return tiny_embedder_folder(tmp_path_factory.mktemp("embedder") / "st")


@pytest.mark.slow
def test_embedder_vectors_as_jsonl_and_npy(tmp_path, embedder_folder):
    folder = embedder_folder
    model = load_model(folder)
    assert isinstance(model, BertTextEmbedder)
    expected = model.encode(TEXTS)
    rows = [json.dumps({"text": text, "n": i}) for i, text in enumerate(TEXTS)]
    source = write_text(tmp_path / "in.jsonl", rows)
    predict_files(str(folder), [str(source)], tmp_path / "vectors.npy", id_column="n", chunk_size=2)
    vectors = np.load(tmp_path / "vectors.npy")
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, expected, atol=1e-5, rtol=0)
    assert [r["id"] for r in read_jsonl(tmp_path / "vectors.ids.jsonl")] == [str(i) for i in range(len(TEXTS))]
    predict_files(model, [str(source)], tmp_path / "vectors.jsonl")
    jsonl = np.array([r["embedding"] for r in read_jsonl(tmp_path / "vectors.jsonl")], np.float32)
    np.testing.assert_allclose(jsonl, expected, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_a_run_killed_between_a_chunk_s_vectors_and_records_resumes_to_the_same_shards(
    tmp_path, embedder_folder, monkeypatch
):
    """A chunk's vectors go into a `.npy` part before its JSON part marks it finished: a run
    stopped between the two resumes to the shards of an uninterrupted run, whose vectors
    are bit for bit the float32 vectors of the `.jsonl` (text) output."""
    model = load_model(embedder_folder)
    source = write_text(tmp_path / "in.txt", TEXTS)
    predict_files(model, [str(source)], tmp_path / "text.jsonl", chunk_size=2)
    predict_files(model, [str(source)], f"{tmp_path / 'whole'}/", chunk_size=2, shard_rows=3)
    write_part = writers._write_text

    def stopped_at_the_second_records(path, text):
        if path.name == "part-000001.jsonl":
            raise KeyboardInterrupt
        write_part(path, text)

    monkeypatch.setattr(writers, "_write_text", stopped_at_the_second_records)
    with pytest.raises(KeyboardInterrupt):
        predict_files(model, [str(source)], f"{tmp_path / 'resumed'}/", chunk_size=2, shard_rows=3)
    parts = tmp_path / "resumed.parts"
    assert sorted(path.name for path in parts.glob("part-*")) == [
        "part-000000.jsonl",
        "part-000000.npy",
        "part-000001.npy",
    ]
    monkeypatch.setattr(writers, "_write_text", write_part)
    predict_files(model, [str(source)], f"{tmp_path / 'resumed'}/", chunk_size=2, shard_rows=3)
    names = [
        "ids-00000-of-00002.jsonl",
        "ids-00001-of-00002.jsonl",
        "vectors-00000-of-00002.npy",
        "vectors-00001-of-00002.npy",
    ]
    assert sorted(path.name for path in (tmp_path / "resumed").iterdir()) == names
    for name in names:
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    shards = np.concatenate([np.load(tmp_path / "whole" / name) for name in names[2:]])
    text = np.array([record["embedding"] for record in read_jsonl(tmp_path / "text.jsonl")], np.float32)
    assert shards.dtype == np.float32 and shards.tobytes() == text.tobytes()
    ids = [record for name in names[:2] for record in read_jsonl(tmp_path / "whole" / name)]
    assert ids == [
        {key: value for key, value in record.items() if key != "embedding"}
        for record in read_jsonl(tmp_path / "text.jsonl")
    ]


def test_an_embedder_folder_with_modules_it_cannot_run_is_an_error(tmp_path, embedder_folder):
    """A Dense module after pooling would change every vector: predict refuses the folder,
    as `BertTextEmbedder.from_checkpoint` does, instead of serving the vectors without it."""
    folder = tmp_path / "dense"
    shutil.copytree(embedder_folder, folder)
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": len(modules), "name": "9", "path": "9_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "texts.txt").write_text("a good film\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"modules.json: modules .*Dense"):
        predict_files(folder, [tmp_path / "texts.txt"], tmp_path / "out.jsonl")


@pytest.mark.slow
def test_tagger_words_entities_and_offsets(tmp_path, folders):
    texts = ["john lives in paris , france", "berlin", "  the  dog "]
    source = write_text(tmp_path / "in.csv", ["text"] + [f'"{text}"' for text in texts])
    model = load_model(folders["token"])
    assert isinstance(model, BertTokenClassifier)
    predict_files(model, [str(source)], tmp_path / "tags.jsonl")
    records = read_jsonl(tmp_path / "tags.jsonl")
    for text, record in zip(texts, records):
        words = [w["word"] for w in record["words"]]
        assert words == text.split()
        assert [w["tag"] for w in record["words"]] == model.tag(words)
        for item in record["words"] + record["entities"]:
            assert text[item["start"] : item["end"]] == item.get("word", item.get("text"))
        for entity in record["entities"]:
            inside = [w for w in record["words"] if entity["start"] <= w["start"] < entity["end"]]
            assert inside[0]["tag"][2:] == entity["entity"] and all(w["tag"][2:] == entity["entity"] for w in inside)


def test_span_answers_are_in_the_context(tmp_path, folders):
    rows = [{"question": q, "context": c} for q, c in PAIRS[:2]] + [{"question": "where", "context": "é in paris"}]
    source = write_text(tmp_path / "in.jsonl", [json.dumps(row) for row in rows])
    predict_files(str(folders["question_answering"]), [str(source)], tmp_path / "answers.jsonl")
    for row, record in zip(rows, read_jsonl(tmp_path / "answers.jsonl")):
        assert row["context"][record["start"] : record["end"]] == record["answer"]


@pytest.mark.slow
def test_multiple_choice_records_equal_model_predict(tmp_path, folders):
    rows = [
        {"question": "the dog", "choices": ["a fox", "the city", "berlin"]},
        {"question": "what", "choices": ["x", "y"]},
        {"question": "", "choices": ["paris is a city in europe", "a b", "c"]},
    ]
    source = write_text(tmp_path / "in.jsonl", [json.dumps(row) for row in rows])
    model = load_model(folders["multiple_choice"])
    predict_files(model, [str(source)], tmp_path / "out.jsonl", PredictOptions(batch_size=2))
    records = read_jsonl(tmp_path / "out.jsonl")
    for group in ([0, 2], [1]):
        questions = np.array([rows[i]["question"] for i in group], dtype=object)
        choices = np.array([rows[i]["choices"] for i in group], dtype=object)
        expected = softmax(np.asarray(model.predict((questions, choices), verbose=0)))
        for i, probabilities in zip(group, expected):
            np.testing.assert_allclose(records[i]["probabilities"], probabilities, atol=1e-5, rtol=0)
            assert records[i]["choice_text"] == rows[i]["choices"][probabilities.argmax()]
    # A row's count is its choices' pieces cut, as tokenizing each (question, choice) pair counts them.
    predict_files(model, [str(source)], tmp_path / "cut.jsonl", PredictOptions(batch_size=2, max_seq_length=6))
    cut = [record.get("truncated_pieces", 0) for record in read_jsonl(tmp_path / "cut.jsonl")]
    preprocessor = serving_preprocessor(model, max_seq_length=6)
    pairs = [([row["question"]] * len(row["choices"]), row["choices"]) for row in rows]
    expected = [int(truncated_pieces(preprocessor, tuple(pair)).sum()) for pair in pairs]
    assert cut == expected and sum(expected) > 0


@pytest.mark.slow
def test_fill_mask_top_k_equal_the_model_s_mlm_logits(tmp_path):
    folder = hf_folder(tmp_path, "masked_lm")
    source = write_text(tmp_path / "in.txt", ["the [MASK] brown fox", "no mask here"])
    predict_files(str(folder), [str(source)], tmp_path / "out.jsonl", PredictOptions(top_k=3))
    records = read_jsonl(tmp_path / "out.jsonl")
    vocabulary = (folder / "vocab.txt").read_text(encoding="utf-8").split()
    ids = [vocabulary.index(token) for token in ("[CLS]", "the", "[MASK]", "brown", "fox", "[SEP]")]
    model = load_model(folder)
    inputs = {"input_word_ids": [ids], "input_mask": [[1] * 6], "input_type_ids": [[0] * 6]}
    logits = model({**{k: np.array(v, np.int32) for k, v in inputs.items()}, "masked_lm_positions": np.array([[2]])})
    probabilities = softmax(np.asarray(logits["mlm_logits"], np.float64))[0, 0]
    best = np.argsort(-probabilities)[:3]
    assert records[0]["masks"][0]["position"] == 2 and records[1]["masks"] == []
    assert records[0]["masks"][0]["tokens"] == [vocabulary[i] for i in best]
    np.testing.assert_allclose(records[0]["masks"][0]["probabilities"], probabilities[best], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_a_saved_model_export_answers_as_its_keras_model(tmp_path, classifier_keras, classifier_export):
    texts = write_text(tmp_path / "in.txt", TEXTS)
    summary = predict_files(
        str(classifier_export), [str(texts)], tmp_path / "export.jsonl", PredictOptions(all_scores=True)
    )
    predict_files(load_model(classifier_keras), [str(texts)], tmp_path / "keras.jsonl", PredictOptions(all_scores=True))
    exported, expected = read_jsonl(tmp_path / "export.jsonl"), read_jsonl(tmp_path / "keras.jsonl")
    assert "cannot count" in summary["notice"]
    assert [r["label"] for r in exported] == [r["label"] for r in expected]
    scores = [[list(r["scores"].values()) for r in records] for records in (exported, expected)]
    np.testing.assert_allclose(*scores, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_bfloat16_records_are_the_model_s_in_bfloat16(tmp_path, classifier_keras, classifier_export):
    texts = write_text(tmp_path / "in.txt", TEXTS)
    out = tmp_path / "bf16.jsonl"
    predict_files(str(classifier_keras), [str(texts)], out, PredictOptions(all_scores=True, compute_dtype="bfloat16"))
    model = with_dtype(load_model(classifier_keras), "bfloat16")
    assert model.encoder.compute_dtype == "bfloat16"
    probabilities = softmax(np.asarray(model.predict(np.array(TEXTS, dtype=object), verbose=0), np.float32))
    records = read_jsonl(out)
    scores = np.array([[r["scores"][label] for label in model.labels] for r in records])
    np.testing.assert_allclose(scores, probabilities, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="dtype were fixed when it was exported"):
        predict_files(
            str(classifier_export), [str(texts)], tmp_path / "e.jsonl", PredictOptions(compute_dtype="bfloat16")
        )


@pytest.fixture(scope="module")
def classifier_predictor(classifier_keras):
    """The predictor `predict_files` builds for `classifier_keras`, built once: tests of how
    rows are read share its traced functions (a path builds and traces them each run)."""
    return predictor_for(str(classifier_keras))


def test_many_files_globs_and_parquet(tmp_path, classifier_predictor):
    first = write_text(tmp_path / "a1.txt", TEXTS[:2])
    write_text(tmp_path / "a2.txt", TEXTS[2:])
    inputs = [str(tmp_path / "a*.txt")]
    try:
        import pyarrow as pa
        import pyarrow.parquet as parquet

        parquet.write_table(pa.table({"text": TEXTS[:3]}), tmp_path / "b.parquet")
        inputs.append(str(tmp_path / "b.parquet"))
    except ImportError:
        pass
    predict_files(classifier_predictor, inputs, tmp_path / "out.jsonl")
    records = read_jsonl(tmp_path / "out.jsonl")
    expected_ids = [f"{first}:1", f"{first}:2"] + [f"{tmp_path / 'a2.txt'}:{i}" for i in (1, 2, 3)]
    if len(inputs) == 2:
        expected_ids += [f"{tmp_path / 'b.parquet'}:{i}" for i in (1, 2, 3)]
        assert [r["label"] for r in records[5:]] == [r["label"] for r in records[:3]]
    assert [r["id"] for r in records] == expected_ids


@pytest.mark.slow
def test_parquet_output_holds_the_jsonl_records(tmp_path, classifier_keras, embedder_folder):
    parquet = pytest.importorskip("pyarrow.parquet")
    texts = write_text(tmp_path / "in.txt", TEXTS)
    predict_files(str(classifier_keras), [str(texts)], tmp_path / "out.parquet", PredictOptions(all_scores=True))
    predict_files(str(classifier_keras), [str(texts)], tmp_path / "out.jsonl", PredictOptions(all_scores=True))
    table = parquet.read_table(tmp_path / "out.parquet").to_pylist()
    expected = read_jsonl(tmp_path / "out.jsonl")
    assert [{**row, "scores": json.loads(row["scores"])} for row in table] == expected
    embedder = load_model(embedder_folder)
    predict_files(embedder, [str(texts)], tmp_path / "vectors.parquet")
    vectors = parquet.read_table(tmp_path / "vectors.parquet").column("embedding").to_pylist()
    np.testing.assert_allclose(vectors, embedder.encode(TEXTS), atol=1e-5, rtol=0)


def test_long_texts_are_counted_not_silently_cut(tmp_path, classifier_keras):
    texts = write_text(tmp_path / "in.txt", ["the quick brown fox " * 10, "a dog"])
    summary = predict_files(
        str(classifier_keras), [str(texts)], tmp_path / "out.jsonl", PredictOptions(max_seq_length=8)
    )
    records = read_jsonl(tmp_path / "out.jsonl")
    assert records[0]["truncated_pieces"] == 40 - 6 and "truncated_pieces" not in records[1]
    assert summary["truncated"] == 1 and summary["notice"].startswith("truncation: 1 of 2 rows")


@pytest.mark.slow
def test_doc_stride_reads_long_texts_in_windows(tmp_path, classifier_keras):
    long_texts = ["the quick brown fox jumps over a lazy dog " * 12, "a dog"]
    texts = write_text(tmp_path / "in.txt", long_texts)
    summary = predict_files(
        str(classifier_keras), [str(texts)], tmp_path / "out.jsonl", PredictOptions(doc_stride=16, all_scores=True)
    )
    records = read_jsonl(tmp_path / "out.jsonl")
    windowed = with_windows(load_model(classifier_keras), doc_stride=16)
    expected = softmax(np.asarray(windowed.predict(np.array(long_texts, dtype=object), verbose=0)))
    assert summary["truncated"] == 0 and summary["notice"] is None
    np.testing.assert_allclose([list(r["scores"].values()) for r in records], expected, atol=1e-5, rtol=0)


def test_a_10_mb_line_is_read_and_counted(tmp_path, classifier_predictor):
    texts = write_text(tmp_path / "in.txt", ["the quick brown fox " * (1 << 19), "a dog"])
    summary = predict_files(classifier_predictor, [str(texts)], tmp_path / "out.jsonl")
    records = read_jsonl(tmp_path / "out.jsonl")
    assert len(records) == 2 and records[0]["truncated_pieces"] > 0 and "truncated_pieces" not in records[1]
    assert summary["truncated"] == 1


class Stopped(Exception):
    """Stands for a kill between two chunks: the parts written so far stay."""


def stopped_after_chunks(count):
    original = writers.PartsFolder.write_chunk

    def write_chunk(self, index, records):
        original(self, index, records)
        if index + 1 == count:
            raise Stopped

    return write_chunk


def with_head_negated(path):
    """The task file at `path` replaced by the same model with its classifier's logits negated (retrained)."""
    model = load_model(path)
    weights = model.get_weights()
    model.set_weights([*weights[:-2], -weights[-2], -weights[-1]])
    model.save(path)
    return model


@pytest.mark.slow
def test_a_run_resumed_after_its_model_or_input_changed_is_refused_naming_it(tmp_path, classifier_keras, capsys):
    """The issue's case: stopped after 2 of 6 chunks, the model file replaced by the
    retrained model: the same command refuses in one line naming the model file, never
    mixing the two models' rows; so does an input with a line added; --overwrite starts over."""
    model = Path(shutil.copy(classifier_keras, tmp_path / "model.keras"))
    lines = [f"{TEXTS[i % len(TEXTS)]} {'fox ' * (i % 4)}".strip() for i in range(30)]
    source, out = write_text(tmp_path / "q.txt", lines), tmp_path / "out.jsonl"
    argv = ["predict", str(model), "--input", str(source), "--output", str(out), "--chunk-size", "5"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writers.PartsFolder, "write_chunk", stopped_after_chunks(2))
        with pytest.raises(Stopped):
            cli(argv)
    old = [record["label"] for record in read_jsonl(tmp_path / "out.jsonl.parts" / "part-000000.jsonl")]
    new_model = with_head_negated(model)
    capsys.readouterr()
    assert cli(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"bert-keras predict: error: {tmp_path / 'out.jsonl.parts'} holds the unfinished run of other "
    )
    assert f"model {model} changed (" in line and line.endswith("or pass --overwrite to start over")
    assert not out.exists() and len(list((tmp_path / "out.jsonl.parts").glob("part-*.jsonl"))) == 2
    write_text(source, [*lines, "one more question"])
    assert cli(argv) == 2
    assert f"inputs {source} changed (" in capsys.readouterr().err
    assert cli([*argv, "--overwrite"]) == 0
    records = read_jsonl(out)
    expected = softmax(np.asarray(new_model.predict(np.array([*lines, "one more question"], dtype=object), verbose=0)))
    assert [r["label"] for r in records] == [new_model.labels[i] for i in expected.argmax(-1)]
    assert [r["label"] for r in records[:5]] != old  # the retrained model answers otherwise
    assert cli(argv) == 2 and f"{out} exists (a finished run); pass --overwrite" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_killed_after_its_output_was_renamed_into_place_is_finished(tmp_path, classifier_keras, monkeypatch):
    """A kill between OUT's rename and the parts' removal: the next run neither resumes
    from the parts nor writes OUT again; it says OUT is finished and clears the parts."""
    source, out = write_text(tmp_path / "q.txt", TEXTS), tmp_path / "out.jsonl"
    monkeypatch.setattr(writers.shutil, "rmtree", lambda path, ignore_errors=False: None)
    predict_files(str(classifier_keras), [str(source)], out, chunk_size=2)
    monkeypatch.undo()
    finished = out.read_bytes()
    (tmp_path / "out.jsonl.parts" / "run.json").unlink()  # removed first, the parts left
    with pytest.raises(FileExistsError, match=f"^{out} exists \\(a finished run\\); pass --overwrite"):
        predict_files(str(classifier_keras), [str(source)], out, chunk_size=2)
    assert out.read_bytes() == finished and not (tmp_path / "out.jsonl.parts").exists()


def run_cli(*args):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / ".pp"), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-c", "import sys; from bert_keras_cli.cli import main; sys.exit(main())", *args]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_sigkill_and_resume_give_each_row_once(tmp_path, classifier_keras, capsys):
    """The run is killed in a process of its own; the same command resumes it (in this
    process: a second TensorFlow import costs 5 CPU-seconds and tests nothing more)."""
    lines = [f"{TEXTS[i % len(TEXTS)]} {'fox ' * (i % 3)}".strip() for i in range(30)]
    source = write_text(tmp_path / "in.txt", lines)
    out = tmp_path / "out.jsonl"
    args = ("predict", str(classifier_keras), "--input", str(source), "--output", str(out), "--chunk-size", "2")
    killed = run_cli(*args, "--batch-size", "1")
    first_part = tmp_path / "out.jsonl.parts" / "part-000000.jsonl"
    deadline = time.time() + 120
    while not first_part.exists() and killed.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL, killed.stderr.read()
    assert not out.exists()  # a killed run leaves no output that looks complete
    parts = sorted((tmp_path / "out.jsonl.parts").glob("part-*.jsonl"))
    assert 1 <= len(parts) < 15
    with pytest.raises(ValueError, match=r"other inputs or settings \(chunk_size: 2 there, 3 now\): run the same"):
        predict_files(str(classifier_keras), [str(source)], out, chunk_size=3)
    capsys.readouterr()
    assert cli([*args, "--batch-size", "1"]) == 0
    assert "resuming after" in capsys.readouterr().err
    whole = tmp_path / "whole.jsonl"
    predict_files(str(classifier_keras), [str(source)], whole, chunk_size=2)
    got, expected = read_jsonl(out), read_jsonl(whole)
    assert [r["id"] for r in got] == [f"{source}:{i}" for i in range(1, 31)]
    assert [r["label"] for r in got] == [r["label"] for r in expected]
    np.testing.assert_allclose([r["probability"] for r in got], [r["probability"] for r in expected], atol=1e-6)
    assert not (tmp_path / "out.jsonl.parts").exists()


def predict_error(capsys, *args):
    assert cli(["predict", *args]) == 2
    return capsys.readouterr().err.strip()


def test_bad_input_is_one_line_error(tmp_path, classifier_keras, capsys):
    model = str(classifier_keras)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert predict_error(capsys, model, "--input", str(empty), "--output", str(tmp_path / "o1.jsonl")) == (
        f"bert-keras predict: error: {empty}: no rows to predict (an empty file)"
    )
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the fox\nbad \xff byte\n")
    error = predict_error(capsys, model, "--input", str(bad), "--output", str(tmp_path / "o2.jsonl"))
    assert error == f"bert-keras predict: error: {bad}:2: not UTF-8 text: byte 0xff at column 5"
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\x00\x01\x02")
    error = predict_error(capsys, model, "--input", str(binary), "--output", str(tmp_path / "o3.jsonl"))
    assert f"{binary}:1: a NUL byte" in error
    table = write_tsv(tmp_path / "t.tsv", ("body",), [("the fox",)])
    error = predict_error(capsys, model, "--input", str(table), "--output", str(tmp_path / "o4.jsonl"))
    assert error == f"bert-keras predict: error: {table}:2: no column 'text'"
    not_model = write_text(tmp_path / "model.txt", ["hello"])
    error = predict_error(capsys, str(not_model), "--input", str(table), "--output", str(tmp_path / "o5.jsonl"))
    assert error.startswith(f"bert-keras predict: error: {not_model} is not a model") and "\n" not in error


def test_a_truncated_parquet_is_one_line_error(tmp_path, classifier_keras, capsys):
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    whole = tmp_path / "whole.parquet"
    parquet.write_table(pa.table({"text": TEXTS}), whole)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(whole.read_bytes()[:-8])  # a copy cut short: no footer
    error = predict_error(capsys, str(classifier_keras), "--input", str(cut), "--output", str(tmp_path / "o.jsonl"))
    assert error.startswith(f"bert-keras predict: error: {cut}: not a readable .parquet file: ") and "\n" not in error


def test_on_error_skip_writes_error_records(tmp_path, classifier_keras, classifier_predictor):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"text": "the fox"}\n{"body": "x"}\nnot json\n{"text": "bad \xff"}\n{"text": "a dog"}\n')
    summary = predict_files(classifier_predictor, [str(bad)], tmp_path / "out.jsonl", on_error="skip")
    records = read_jsonl(tmp_path / "out.jsonl")
    assert summary["errors"] == 3 and len(records) == 5
    assert [("error" in r) for r in records] == [False, True, True, True, False]
    assert records[1]["error"] == f"{bad}:2: no column 'text'"
    assert records[2]["error"].startswith(f"{bad}:3: not JSON")
    assert records[3]["error"] == f"{bad}:4: not UTF-8 text: byte 0xff at column 15"
    table = tmp_path / "bad.tsv"
    table.write_bytes(b"text\nthe fox\n\xff bad\na dog\n\nlast\tfield\n")
    predict_files(classifier_predictor, [str(table)], tmp_path / "table.jsonl", on_error="skip")
    rows = read_jsonl(tmp_path / "table.jsonl")
    assert [(r["id"], r.get("error")) for r in rows] == [
        (f"{table}:2", None),
        (f"{table}:3", f"{table}:3: not UTF-8 text: byte 0xff at column 1"),
        (f"{table}:4", None),
        (f"{table}:6", f"{table}:6: 2 fields, the header has 1"),
    ]
    assert [r["label"] for r in rows[::2]] == [records[0]["label"], records[4]["label"]]
    model = load_model(classifier_keras)
    probabilities = softmax(np.asarray(model.predict(np.array(["the fox", "a dog"], dtype=object), verbose=0)))
    np.testing.assert_allclose([records[0]["probability"], records[4]["probability"]], probabilities.max(-1), atol=1e-5)


def doc_block(test):
    return block_run_by(f"tests/serving/test_batch_predict.py::{test}").text


@pytest.fixture
def tickets(tmp_path, monkeypatch, classifier_keras):
    """docs/predict.md's workspace: best.keras and tickets/*.tsv with ticket_id and body."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(classifier_keras, "best.keras")
    Path("tickets").mkdir()
    write_tsv(Path("tickets/a.tsv"), ("ticket_id", "body"), [("t1", TEXTS[0]), ("t2", TEXTS[2])])
    write_tsv(Path("tickets/b.tsv"), ("ticket_id", "body"), [("t3", TEXTS[3])])
    return ["t1", "t2", "t3"]


def test_docs_command(tickets):
    command = shlex.split(doc_block("test_docs_command"))
    assert command[:2] == ["bert-keras", "predict"] and cli(command[1:]) == 0
    records = read_jsonl("labels.jsonl")
    assert [r["id"] for r in records] == tickets and all(len(r["scores"]) == 3 for r in records)


def test_docs_script(tickets, capsys):
    exec(doc_block("test_docs_script"), {})
    assert capsys.readouterr().out.splitlines()[-1] == "3 rows, 0 in error"
    assert [r["id"] for r in read_jsonl("labels.jsonl")] == tickets
