"""The stable fine-tuning recipe's flags, `--bias-correction` (Mosbach et al. 2021) and
`--reinit-layers N` (Zhang et al. 2021), as every fine-tuning command hands them to the
library, and a tiny `finetune glue` run with both: its first step is Adam's, lr * sign(g),
and only the top layer starts anew."""

import keras
import numpy as np
import pytest
from conftest import DATA, require
from harness import TINY, VOCAB, Reached, command_files, recorder, tiny_preprocessor

from bert_keras import BertClassifier, BertConfig, BertEncoder
from bert_keras.recipes import distillation, finetuning
from bert_keras_cli.cli import build_parser
from bert_keras_cli.cli import main as cli


@pytest.fixture
def files(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    command_files(tmp_path)
    config = BertConfig.preset("tiny", vocab_size=len(VOCAB), num_hidden_layers=1)
    BertEncoder(config).save(tmp_path / "init.keras")
    return tmp_path


@pytest.mark.slow
def test_the_flags_reach_the_run_of_every_task(files, monkeypatch):
    init = ["--init", str(files / "init.keras"), "--vocab", str(files / "vocab.txt")]
    train, pairs = str(files / "train.tsv"), str(files / "pairs.tsv")
    conll = files / "conll"
    conll.mkdir()
    for split in ("train", "testa"):
        lines = require(DATA / "conll2003" / f"eng.{split}").read_text().splitlines()[:20]
        (conll / f"eng.{split}").write_text("\n".join(lines) + "\n")
    squad = str(require(DATA / "squad" / "dev-v1.1.json"))
    (files / "graded.tsv").write_text("query\tdocument\tlabel\nwho\tjohn\t1\nwho\tparis\t0\n", encoding="utf-8")
    tasks = {
        "tsv": ["--train", train, "--dev", train],
        "glue": ["--task", "sst-2", "--data-dir", str(files / "SST-2")],
        "conll": ["--data-dir", str(conll)],
        "squad": ["--train-file", squad, "--predict-file", squad, "--train-articles", "0:1"]
        + ["--predict-articles", "47:48", "--max-examples", "4"],
        "embedder": ["--train", pairs, "--dev", pairs],
        "reranker": ["--train", str(files / "graded.tsv"), "--dev", str(files / "graded.tsv")],
    }
    calls = recorder(monkeypatch, finetuning, "finetune")
    for task, arguments in tasks.items():
        argv = ["finetune", task, *arguments, *init, "--output-dir", str(files / f"out-{task}")]
        with pytest.raises(Reached):
            cli([*argv, "--bias-correction", "--reinit-layers", "1"])
        assert (calls["bias_correction"], calls["reinit_layers"]) == (True, 1), task
    with pytest.raises(Reached):
        cli([*argv, "--output-dir", str(files / "out-default")])
    assert (calls["bias_correction"], calls["reinit_layers"]) == (False, 0)
    teacher = BertClassifier(BertEncoder(TINY), 2, preprocessor=tiny_preprocessor(), labels=["neg", "pos"])
    teacher.save(files / "teacher.keras")
    calls = recorder(monkeypatch, distillation, "finetune")
    with pytest.raises(Reached):
        cli(
            ["distill", "--teacher", str(files / "teacher.keras"), "--student", "teacher:1", *tasks["tsv"]]
            + ["--output-dir", str(files / "distill"), "--bias-correction", "--reinit-layers", "1"]
        )
    assert (calls["bias_correction"], calls["reinit_layers"]) == (True, 1)


def test_the_values_parse_one_at_a_time(capsys):
    argv = ["finetune", "tsv", "--train", "t", "--dev", "t", "--output-dir", "o"]
    parse = build_parser().parse_args
    assert parse(argv).bias_correction is False and parse(argv).reinit_layers == 0
    assert parse([*argv, "--bias-correction"]).bias_correction is True
    # finetune's flags are search dimensions: a value given is a list of one (`ValueList`)
    for word, value in (("true", True), ("Off", False), ("1", True), ("no", False)):
        assert parse([*argv, "--bias-correction", word]).bias_correction == [value]
    assert parse([*argv, "--reinit-layers", "3"]).reinit_layers == [3]
    assert parse([*argv, "--reinit-layers", "0,3"]).reinit_layers == [0, 3]
    for flag, value, message in (
        ("--bias-correction", "maybe", "argument --bias-correction: expected true or false, got 'maybe'"),
        ("--reinit-layers", "-1", "argument --reinit-layers: expected a number of layers (0 or more), got '-1'"),
        ("--reinit-layers", "two", "argument --reinit-layers: expected a number of layers (0 or more), got 'two'"),
    ):
        with pytest.raises(SystemExit):
            parse([*argv, f"{flag}={value}"])
        assert message in capsys.readouterr().err


@pytest.mark.slow  # 49 s on the 2 cores under a load of 11 (tracing the train step)
def test_a_glue_run_with_both_starts_the_top_layer_anew_and_steps_as_adam(files, capsys):
    """One update at learning rate 1e-3, no warm-up: Adam's first step moves every weight
    with a gradient by lr * g / (|g| + eps), so the classifier's zero-initialised bias ends
    at +-1e-3 (the original's uncorrected step would be 3.16e-3); the layer below and the
    embeddings move at most that far from --init, the re-initialised top layer much further."""
    keras.utils.set_random_seed(1)
    init = BertEncoder(BertConfig.preset("tiny", vocab_size=len(VOCAB), num_hidden_layers=2))
    init.save(files / "init.keras")
    argv = ["finetune", "glue", "--task", "sst-2", "--data-dir", str(files / "SST-2"), "--init"]
    argv += [str(files / "init.keras"), "--vocab", str(files / "vocab.txt"), "--verbose", "0", "--batch-size", "2"]
    argv += ["--max-train-steps", "1", "--warmup-proportion", "0", "--learning-rate", "1e-3"]
    argv += ["--bias-correction", "--reinit-layers", "1", "--output-dir", str(files / "run")]
    assert cli(argv) == 0
    assert "AdamW with bias correction, top 1 layer(s) and pooler re-initialised" in capsys.readouterr().out
    model = keras.saving.load_model(files / "run" / "best.keras")
    head_bias = model.weights[-1]
    assert head_bias.path.endswith("bias") and head_bias.shape == (2,)
    np.testing.assert_allclose(np.abs(head_bias.numpy()), 1e-3, rtol=1e-3)
    for kept in (init.embeddings, init.transformer_blocks[0]):
        tuned = model.encoder.get_layer(kept.name)
        for before, after in zip(kept.weights, tuned.weights):
            assert np.abs(after.numpy() - before.numpy()).max() <= 1.01e-3, after.path
    for renewed in (init.transformer_blocks[1].qkv_kernel, init.pooler.dense.kernel):
        (after,) = [weight for weight in model.encoder.weights if weight.path == renewed.path]
        assert np.abs(after.numpy() - renewed.numpy()).max() > 0.01, renewed.path

    too_many = [*argv[:-1], str(files / "too-many"), "--reinit-layers", "3"]
    assert cli(too_many) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(
        "cannot re-initialise 3 layers (--reinit-layers, reinit_layers): the encoder has 2 Transformer layers"
    )
    assert not (files / "too-many").exists()
