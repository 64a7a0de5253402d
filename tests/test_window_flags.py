"""`--doc-stride`, `--window-pooling` and `--max-windows` as the commands hand them to the
library: each command runs up to the library call, which is replaced by a recorder."""

import pytest
from harness import tiny_encoder, tiny_preprocessor

from bert_keras import BertClassifier, BertTextEmbedder
from bert_keras.serving import export
from pipelines.cli import main as cli


class Reached(Exception):
    """The command got to the library call."""


def recorder(monkeypatch, owner, name):
    calls = {}

    def record(*args, **kwargs):
        calls.update(kwargs, args=args)
        raise Reached

    monkeypatch.setattr(owner, name, record)
    return calls


@pytest.fixture
def files(tmp_path):
    (tmp_path / "train.tsv").write_text("text\tlabel\na good film\tpos\na bad film\tneg\n", encoding="utf-8")
    (tmp_path / "pairs.tsv").write_text("anchor\tpositive\nwho\tjohn\nwhere\tparis\n", encoding="utf-8")
    (tmp_path / "SST-2").mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (tmp_path / "SST-2" / name).write_text("sentence\tlabel\na good film\t1\na bad film\t0\n", encoding="utf-8")
    (tmp_path / "lines.txt").write_text("a good film\n", encoding="utf-8")
    (tmp_path / "init").mkdir()
    return tmp_path


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
