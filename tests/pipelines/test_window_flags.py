"""`--doc-stride`, `--window-pooling` and `--max-windows` as the commands hand them to the
library: each command runs up to the library call, which is replaced by a recorder."""

import keras
import numpy as np
import pytest
from harness import Reached, command_files, recorder, tiny_encoder, tiny_preprocessor

from bert_keras import BertClassifier, BertTextEmbedder
from bert_keras.serving import export
from bert_keras_cli.cli import main as cli


@pytest.fixture
def files(tmp_path):
    return command_files(tmp_path)


@pytest.mark.parametrize("pooling", [None, "max"])
def test_finetune_classifiers(files, monkeypatch, pooling):
    calls = recorder(monkeypatch, BertClassifier, "from_checkpoint")
    common = ["--init", str(files / "init"), "--output-dir", str(files / "out"), "--doc-stride", "64"]
    common += [] if pooling is None else ["--window-pooling", pooling]
    for task in (
        ["tsv", "--train", str(files / "train.tsv"), "--dev", str(files / "train.tsv")],
        ["glue", "--task", "sst-2", "--data-dir", str(files / "SST-2")],
    ):
        calls.clear()
        with pytest.raises(Reached):
            cli(["finetune", *task, *common])
        assert (calls["doc_stride"], calls["window_pooling"]) == (64, pooling or "mean")


def test_finetune_embedder_and_embed(files, monkeypatch):
    calls = recorder(monkeypatch, BertTextEmbedder, "from_checkpoint")
    pairs = str(files / "pairs.tsv")
    with pytest.raises(Reached):
        cli(
            ["finetune", "embedder", "--train", pairs, "--dev", pairs, "--init", str(files / "init")]
            + ["--output-dir", str(files / "out"), "--doc-stride", "32"]
        )
    assert calls["doc_stride"] == 32
    calls.clear()
    with pytest.raises(Reached):
        cli(
            ["embed", "--input", str(files / "lines.txt"), "--output", str(files / "v.npy")]
            + ["--init", str(files / "init"), "--doc-stride", "16"]
        )
    assert calls["doc_stride"] == 16


def test_export(files, monkeypatch, capsys):
    path = files / "model.keras"
    BertClassifier(tiny_encoder(), preprocessor=tiny_preprocessor(), doc_stride=8).save(path)
    calls = recorder(monkeypatch, export, "export_for_serving")
    with pytest.raises(Reached):
        cli(["export", str(path), "--out", str(files / "e"), "--max-windows", "5", "--window-pooling", "max"])
    model = calls["args"][0]
    assert (model.doc_stride, model.window_pooling, calls["max_windows"]) == (8, "max", 5)
    with pytest.raises(Reached):
        cli(["export", str(path), "--out", str(files / "e"), "--doc-stride", "4"])
    assert (calls["args"][0].doc_stride, calls["args"][0].window_pooling, calls["max_windows"]) == (4, "mean", None)
    BertTextEmbedder(tiny_encoder(), preprocessor=tiny_preprocessor()).save(files / "embedder.keras")
    assert cli(["export", str(files / "embedder.keras"), "--out", str(files / "e"), "--window-pooling", "max"]) == 2
    assert "has no windows to set (window_pooling)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli(["export", str(path), "--out", str(files / "e"), "--window-pooling", "sum"])


@pytest.mark.slow
def test_finetune_tsv_with_windows_then_export(tmp_path, capsys, monkeypatch):
    """A real (tiny) run: documents of several SST-2 sentences, windows of 32 tokens."""
    from conftest import DATA, require

    from bert_keras import BertConfig, BertEncoder
    from bert_keras.serving.tfserving.session import SessionPredictor
    from bert_keras_cli.finetune import common as finetune

    rows = [row.split("\t") for row in require(DATA / "glue" / "SST-2" / "dev.tsv").read_text().splitlines()[1:41]]
    documents = ["\t".join([" ".join(text for text, _ in rows[i : i + 4]), rows[i][1]]) for i in range(0, 40, 4)]
    (tmp_path / "long.tsv").write_text("text\tlabel\n" + "\n".join(documents) + "\n", encoding="utf-8")
    init = tmp_path / "encoder.keras"
    BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1)).save(init)
    data = str(tmp_path / "long.tsv")
    argv = ["finetune", "tsv", "--train", data, "--dev", data, "--init", str(init), "--batch-size", "4"]
    argv += ["--vocab", str(require(DATA / "vocab" / "vocab.txt")), "--max-train-steps", "2", "--verbose", "0"]
    argv += ["--max-seq-length", "32", "--output-dir", str(tmp_path / "run")]
    with monkeypatch.context() as patch, pytest.raises(Reached):  # without windows: up to the training
        recorder(patch, finetune, "train")
        cli(argv)
    assert "truncation: 10 of 10 training examples are longer than 32 tokens" in capsys.readouterr().out
    assert cli([*argv[:-1], str(tmp_path / "windows"), "--doc-stride", "16", "--window-pooling", "max"]) == 0
    assert "truncation" not in capsys.readouterr().out
    model = keras.saving.load_model(tmp_path / "windows" / "best.keras")
    assert (model.doc_stride, model.window_pooling) == (16, "max")
    assert (
        cli(["export", str(tmp_path / "windows" / "best.keras"), "--out", str(tmp_path / "e"), "--max-windows", "64"])
        == 0
    )
    texts = [document.split("\t")[0] for document in documents]
    predictor = SessionPredictor(tmp_path / "e" / "1")
    served = predictor.predict_texts(text=texts)["logits"]
    predictor.close()
    np.testing.assert_allclose(served, model.predict(np.array(texts), verbose=0), atol=1e-5)
