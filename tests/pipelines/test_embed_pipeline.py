"""The embedding path as a user runs it, on real text: `finetune embedder` on SQuAD
question -> paragraph pairs, `embed`, `export`, `serve`, and a gRPC/REST client asking for
vectors; with the file errors of the readers."""

import json
import random
import re

import keras
import numpy as np
import pytest
from conftest import DATA, require

from bert_keras_cli.cli import main as cli


def squad_pairs(count, offset=0):
    data = json.loads(require(DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    rows = [(qa["question"], p["context"]) for a in data for p in a["paragraphs"] for qa in p["qas"]]
    random.Random(0).shuffle(rows)
    return [tuple(" ".join(text.split()) for text in row) for row in rows[offset : offset + count]]


def write_pairs(path, rows, header=("anchor", "positive")):
    path.write_text("\t".join(header) + "\n" + "".join("\t".join(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def embedder_run(tmp_path_factory, minilm_dir):
    """`finetune embedder` from all-MiniLM-L6-v2 for 2 steps of 8 pairs."""
    base = tmp_path_factory.mktemp("embedder")
    train = write_pairs(base / "train.tsv", squad_pairs(16))
    dev = write_pairs(base / "dev.tsv", squad_pairs(16, offset=1000))
    out = base / "run"
    assert (
        cli(
            [
                "finetune",
                "embedder",
                "--train",
                str(train),
                "--dev",
                str(dev),
                "--output-dir",
                str(out),
                "--init",
                str(minilm_dir),
                "--batch-size",
                "8",
                "--max-train-steps",
                "2",
                "--verbose",
                "0",
                "--max-seq-length",
                "64",
                "--learning-rate",
                "1e-5",
            ]
        )
        == 0
    )
    return out


@pytest.fixture(scope="module")
def best_model(embedder_run):
    """The run's best.keras, loaded once for the module's tests (which only encode with it)."""
    return keras.saving.load_model(embedder_run / "best.keras")


@pytest.mark.slow
def test_finetune_embedder_keeps_the_best_model_by_retrieval(embedder_run, best_model, minilm_dir):
    from bert_keras import BertTextEmbedder
    from bert_keras.datasets import retrieval

    history = json.loads((embedder_run / "eval_results.json").read_text())
    assert {"recall@1", "recall@10", "mrr@10", "ndcg@10"} <= set(history[0])
    model = best_model
    assert isinstance(model, BertTextEmbedder) and model.preprocessor.packer.max_seq_length == 64
    # The recorded metric is the model's: recomputed from the saved model and the dev file.
    dev = squad_pairs(16, offset=1000)
    queries, documents, relevant = retrieval.retrieval_set([q for q, _ in dev], [p for _, p in dev])
    metrics = retrieval.evaluate_retrieval(model.encode(queries), model.encode(documents), relevant)
    assert metrics["ndcg@10"] == pytest.approx(history[0]["ndcg@10"], abs=1e-6)
    # It trained, and the sentence-transformers folder holds the same model.
    texts = queries[:4]
    start = BertTextEmbedder.from_checkpoint(minilm_dir, max_seq_length=64)
    assert np.abs(model.encode(texts) - start.encode(texts)).max() > 1e-4
    folder = BertTextEmbedder.from_checkpoint(embedder_run / "sentence-transformers")
    np.testing.assert_allclose(folder.encode(texts), model.encode(texts), atol=1e-6)


@pytest.mark.slow
def test_embed_writes_one_vector_per_line_in_order(embedder_run, best_model, tmp_path, capsys):
    lines = ["Where is the Eiffel Tower?", "", "a much longer line " * 20, "Ünïcödé text"]
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    model_path = embedder_run / "best.keras"
    assert (
        cli(
            [
                "embed",
                "--init",
                str(model_path),
                "--input",
                str(source),
                "--output",
                str(tmp_path / "v.npy"),
                "--batch-size",
                "2",
            ]
        )
        == 0
    )
    vectors = np.load(tmp_path / "v.npy")
    expected = best_model.encode(lines, batch_size=1)
    assert vectors.shape == (4, 384)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    assert cli(["embed", "--init", str(model_path), "--input", str(source), "--output", str(tmp_path / "v.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert [row["line"] for row in rows] == [1, 2, 3, 4]
    np.testing.assert_allclose([row["embedding"] for row in rows], vectors, atol=1e-6)
    capsys.readouterr()
    (tmp_path / "bad.txt").write_bytes(b"fine\n\xff\xfe broken\n")
    assert (
        cli(
            [
                "embed",
                "--init",
                str(model_path),
                "--input",
                str(tmp_path / "bad.txt"),
                "--output",
                str(tmp_path / "x.npy"),
            ]
        )
        != 0
    )
    assert "bad.txt: not UTF-8 text" in capsys.readouterr().err
    assert not (tmp_path / "x.npy").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ("anchor\tpositive\nonly one field\n", r"bad.tsv:2: malformed line: 1 tab-separated fields, expected 2"),
        (
            "question\tanswer\na\tb\n",
            r"bad.tsv: header \['question', 'answer'\] lacks column\(s\) \['text_a', 'text_b', 'score'\]",
        ),
        ("text_a\ttext_b\tscore\na\tb\thigh\n", r"bad.tsv:2: score 'high' is not a number"),
        ("", r"bad.tsv: empty file"),
    ],
)
def test_finetune_embedder_names_the_bad_line(content, message, tmp_path, capsys, minilm_dir):
    bad = tmp_path / "bad.tsv"
    bad.write_text(content, encoding="utf-8")
    assert (
        cli(
            [
                "finetune",
                "embedder",
                "--train",
                str(bad),
                "--dev",
                str(bad),
                "--output-dir",
                str(tmp_path / "o"),
                "--init",
                str(minilm_dir),
            ]
        )
        != 0
    )

    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_exported_embedder_serves_the_model_s_vectors(embedder_run, best_model, tmp_path, capsys):
    from bert_keras.serving.client import ServingClient
    from bert_keras.serving.tfserving.local_server import LocalModelServer
    from bert_keras.serving.tfserving.session import SessionPredictor

    model = best_model
    texts = ["Which team won Super Bowl 50?", "The Broncos defeated the Panthers."]
    expected = model.encode(texts)
    assert cli(["export", str(embedder_run / "best.keras"), "--out", str(tmp_path / "embed")]) == 0
    assert "signature serving_default(text: string[-1])" in capsys.readouterr().out
    path = tmp_path / "embed" / "1"
    predictor = SessionPredictor(path)  # TF Serving's loader, warm-up replayed
    np.testing.assert_allclose(predictor.predict_texts(text=texts)["embeddings"], expected, atol=1e-5)
    predictor.close()
    server = LocalModelServer(path.parent, name="embed", grpc_port=0, rest_port=0).start()
    try:
        client = ServingClient(
            "127.0.0.1", model="embed", grpc_port=server.grpc_port, rest_port=server.rest_port, timeout=30
        )
        # One output: TF Serving's REST rows are the vectors themselves, not {name: value}.
        np.testing.assert_allclose(client.predict_rest(text=texts), expected, atol=1e-5)
        np.testing.assert_allclose(client.predict(text=texts)["embeddings"], expected, atol=1e-5)
    finally:
        server.stop()
