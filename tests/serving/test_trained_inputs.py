"""What a fine-tuned model was trained on travels with it: a sentence-pair model exports
and serves `text_a`/`text_b` without being told, and a vocabulary that does not fit the
checkpoint is refused, naming both files, before any work."""

import json

import keras
import numpy as np
import pytest
from conftest import DATA, require

from bert_keras import BertConfig, BertEncoder
from bert_keras.serving.client import ServingClient
from bert_keras.serving.tfserving.session import ServingError, SessionPredictor, make_request
from bert_keras_cli.cli import main as cli

MRPC = DATA / "glue" / "MRPC"
FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def mrpc_run(tmp_path_factory):
    """`bert-keras finetune glue --task mrpc` on a few real rows, from a tiny encoder."""
    base = tmp_path_factory.mktemp("mrpc")
    lines = require(MRPC / "train.tsv").read_text(encoding="utf-8-sig").splitlines()
    data = base / "MRPC"
    data.mkdir()
    (data / "train.tsv").write_text("\n".join(lines[:17]) + "\n", encoding="utf-8")
    (data / "dev.tsv").write_text("\n".join(lines[:1] + lines[17:25]) + "\n", encoding="utf-8")
    init = base / "encoder.keras"
    BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1)).save(init)
    out = base / "run"
    assert (
        cli(
            [
                "finetune",
                "glue",
                "--task",
                "mrpc",
                "--data-dir",
                str(data),
                "--output-dir",
                str(out),
                "--init",
                str(init),
                "--vocab",
                str(require(DATA / "vocab" / "vocab.txt")),
                "--batch-size",
                "8",
                "--epochs",
                "1",
                "--max-train-steps",
                "2",
                "--verbose",
                "0",
                "--max-seq-length",
                "64",
            ]
        )
        == 0
    )
    return out / "best.keras"


PAIRS = {
    "text_a": ["The cat sat on the mat.", "Stocks fell sharply on Monday."],
    "text_b": ["A cat was sitting on the mat.", "Shares rose on Tuesday."],
}


@pytest.mark.slow
def test_pair_model_records_exports_and_serves_its_text_inputs(mrpc_run, tmp_path, capsys):
    from bert_keras.serving.tfserving.local_server import LocalModelServer

    model = keras.saving.load_model(mrpc_run)
    assert model.segments == ("text_a", "text_b") and model.labels == ["0", "1"]
    assert model.preprocessor.packer.max_seq_length == 64
    with pytest.raises(ValueError, match=r"trained on 2 text input\(s\) \['text_a', 'text_b'\]; got 1"):
        model.predict(np.array(PAIRS["text_a"], dtype=object), verbose=0)
    expected = model.predict(
        (np.array(PAIRS["text_a"], dtype=object), np.array(PAIRS["text_b"], dtype=object)), verbose=0
    )

    assert cli(["export", str(mrpc_run), "--out", str(tmp_path / "mrpc")]) == 0  # no --segments, no --labels
    printed = capsys.readouterr()
    assert "signature serving_default(text_a: string[-1], text_b: string[-1])" in printed.out, printed.out
    assert "warning" not in printed.err
    path = tmp_path / "mrpc" / "1"
    predictor = SessionPredictor(path)  # TF Serving's loader path, warm-up replayed
    out = predictor.predict_texts(**PAIRS)
    np.testing.assert_allclose(out["logits"], expected, atol=1e-5)
    assert [label.decode() for label in out["labels"]] == [str(i) for i in expected.argmax(-1)]
    with pytest.raises(ServingError, match="INVALID_ARGUMENT"):
        predictor.predict(make_request("bert", "serving_default", {"text": PAIRS["text_a"]}))
    predictor.close()

    server = LocalModelServer(path.parent, name="mrpc", grpc_port=0, rest_port=0).start()
    try:
        client = ServingClient(
            "127.0.0.1", model="mrpc", grpc_port=server.grpc_port, rest_port=server.rest_port, timeout=30
        )
        rows = client.predict_rest(**PAIRS)
        np.testing.assert_allclose([row["logits"] for row in rows], expected, atol=1e-5)
        status, body = server.rest(
            "POST", "/v1/models/mrpc:predict", json.dumps({"instances": [{"text": "a single sentence"}]}).encode()
        )
        assert status == 400 and "error" in json.loads(body), body
        with pytest.raises(ServingError, match="INVALID_ARGUMENT"):
            client.predict(text=PAIRS["text_a"])
        # The smoke script builds its requests from the model's signature.
        import sys
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "serving"))
        import smoke

        for protocol in ("grpc", "rest"):
            assert (
                smoke.main(
                    [
                        "--model",
                        "mrpc",
                        "--protocol",
                        protocol,
                        "--grpc-port",
                        str(server.grpc_port),
                        "--rest-port",
                        str(server.rest_port),
                        "--requests",
                        "2",
                        "--concurrency",
                        "1",
                    ]
                )
                == 0
            )
        printed = capsys.readouterr().out
        assert printed.count("serving_default inputs: text_a, text_b") == 2 and " 0 failed" in printed
    finally:
        server.stop()


@pytest.mark.slow
def test_segments_that_contradict_the_training_are_warned_about(mrpc_run, tmp_path, capsys):
    from bert_keras_cli.cli import warning_line

    with pytest.warns(UserWarning) as caught:
        assert cli(["export", str(mrpc_run), "--out", str(tmp_path / "single"), "--segments", "text"]) == 0
    (warning,) = [w for w in caught if "text inputs" in str(w.message)]
    assert warning_line(warning.message, warning.category, warning.filename, warning.lineno) == (
        "bert-keras: warning: serving text inputs ['text']: a different number of text inputs than the "
        "model was trained on (['text_a', 'text_b'])\n"
    )


def test_models_saved_before_the_record_export_as_before(tmp_path):
    from bert_keras.serving import export

    model = keras.saving.load_model(FIXTURES / "classifier_v0.keras")
    assert model.segments is None and model.labels is None
    preprocessor = model.preprocessor
    path = export.export_for_serving(model, preprocessor, tmp_path, labels=["x", "y", "z"])
    assert set(export.describe_signatures(path)["serving_default"]["inputs"]) == {"text"}


@pytest.mark.slow
def test_fit_records_the_segments_and_the_config_keeps_them():
    from bert_keras import BertClassifier, BertPreprocessor, BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=16,
    )
    model = BertClassifier(BertEncoder(config), 2, preprocessor=BertPreprocessor(BertTokenizer(vocab), seq_length=8))
    model.compile()
    model.fit(
        {"question": np.array(["a b", "b"]), "answer": np.array(["a", "b a"])}, np.array([0, 1]), epochs=1, verbose=0
    )
    assert model.segments == ("question", "answer")
    restored = BertClassifier.from_config(model.get_config())
    assert restored.segments == ("question", "answer")


# --- vocabulary checks -----------------------------------------------------------------


@pytest.fixture(scope="module")
def vocabularies(tmp_path_factory, minilm_dir):
    """The checkpoint's own vocab elsewhere, a smaller one (as the demo learns), and one of
    the same size with two tokens swapped."""
    base = tmp_path_factory.mktemp("vocabs")
    own = (minilm_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    paths = {"same": base / "same.txt", "small": base / "small.txt", "swapped": base / "swapped.txt"}
    paths["same"].write_text("\n".join(own) + "\n", encoding="utf-8")
    paths["small"].write_text("\n".join(own[:3684]) + "\n", encoding="utf-8")
    swapped = list(own)
    swapped[2000], swapped[2001] = swapped[2001], swapped[2000]
    paths["swapped"].write_text("\n".join(swapped) + "\n", encoding="utf-8")
    return paths


def test_check_vocabulary_names_both_files(vocabularies, minilm_dir):
    from bert_keras.text.vocab import VocabularyMismatch, check_vocabulary

    own = minilm_dir / "vocab.txt"
    assert len(check_vocabulary(vocabularies["same"], 30522, minilm_dir, own)) == 30522
    with pytest.raises(VocabularyMismatch, match=f"{vocabularies['small']} .3684 tokens.*{minilm_dir}.*{own}"):
        check_vocabulary(vocabularies["small"], 30522, minilm_dir, own)
    with pytest.raises(VocabularyMismatch, match=f"{vocabularies['swapped']}.*line 2001 is"):
        check_vocabulary(vocabularies["swapped"], 30522, minilm_dir, own)
    # No vocab beside the checkpoint: its size still decides.
    with pytest.raises(VocabularyMismatch, match="has 3684 tokens but the checkpoint .* has vocab_size=30522"):
        check_vocabulary(vocabularies["small"], 30522, "ckpt", None)
    with pytest.raises(VocabularyMismatch, match="has 30522 tokens .* vocab_size=3684"):
        check_vocabulary(vocabularies["same"], 3684, "ckpt", None)
    assert len(check_vocabulary(vocabularies["same"], 30528, "ckpt", None)) == 30522  # a padded table


@pytest.mark.parametrize("command", ["finetune", "pretrain", "extract-features"])
def test_commands_refuse_a_vocab_that_is_not_the_checkpoint_s(command, vocabularies, minilm_dir, tmp_path, capsys):
    if command == "finetune":
        (tmp_path / "train.tsv").write_text("text\tlabel\na\t0\nb\t1\n")
        argv = [
            "finetune",
            "tsv",
            "--train",
            str(tmp_path / "train.tsv"),
            "--dev",
            str(tmp_path / "train.tsv"),
            "--output-dir",
            str(tmp_path / "out"),
        ]
    elif command == "pretrain":
        argv = [
            "pretrain",
            "--config",
            "tiny",
            "--corpus",
            str(require(DATA / "pretraining" / "sample_text.txt")),
            "--output",
            str(tmp_path / "out"),
            "--steps",
            "2",
            "--checkpoint-every",
            "1",
        ]
    else:
        (tmp_path / "lines.txt").write_text("a line\n")
        argv = ["extract-features", "--input", str(tmp_path / "lines.txt"), "--output", str(tmp_path / "f.jsonl")]
    assert cli([*argv, "--init", str(minilm_dir), "--vocab", str(vocabularies["swapped"])]) == 2
    err = capsys.readouterr().err
    assert str(vocabularies["swapped"]) in err and str(minilm_dir) in err and "line 2001" in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.keras"))


@pytest.mark.slow
def test_export_refuses_a_vocab_that_is_not_the_model_s(mrpc_run, vocabularies, tmp_path, capsys):
    assert cli(["export", str(mrpc_run), "--out", str(tmp_path / "x"), "--vocab", str(vocabularies["swapped"])]) == 2
    err = capsys.readouterr().err
    assert f"{vocabularies['swapped']} (30522 tokens) is not the vocabulary of the checkpoint {mrpc_run}" in err
    assert not (tmp_path / "x").exists()
