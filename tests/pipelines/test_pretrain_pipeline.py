"""The pre-training pipeline: learning on sample_text.txt, SIGKILL and resume, CLI output."""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, VOCAB_FILE, require
from harness import markdown_table, one_layer_bert_config, validation_summaries

from bert_keras import BertConfig, BertEncoder, BertTokenizer
from bert_keras.data import pretraining_shards
from bert_keras.data.dynamic_masking import dynamic_masking_dataset
from bert_keras.data.tfrecords import pretraining_dataset
from bert_keras.models.pretrainer import BertPretrainer
from bert_keras.training.optimization import create_optimizer

pytestmark = pytest.mark.slow  # most tests here take over 3 CPU-seconds (docs/development.md)

SAMPLE = DATA / "pretraining" / "sample_text.txt"
ROOT = Path(__file__).resolve().parents[2]


def test_loss_decreases_on_sample_text(tmp_path):
    tokenizer = BertTokenizer(str(require(VOCAB_FILE)))
    records = tmp_path / "sample.tfrecord"
    pretraining_shards.create_pretraining_data(
        [require(SAMPLE)], records, tokenizer, pretraining_shards.Recipe(dupe_factor=5), progress=False
    )
    # A fixed evaluation set (static masks) measured before and after training.
    held = pretraining_dataset(str(records), 8, shuffle_buffer=0, repeat=False).take(4).cache()
    pretrainer = BertPretrainer(BertEncoder(BertConfig.preset("tiny")))
    pretrainer.compile(optimizer=create_optimizer(1e-3, 20, 3))
    before = pretrainer.evaluate(held, return_dict=True, verbose=0)
    train = dynamic_masking_dataset([SAMPLE], tokenizer, batch_size=8, seed=1)
    # 20 steps take the masked LM loss from about 8.3 to 5.0 (15 steps: 5.6, 30: 4.8, 60: 4.5).
    pretrainer.fit(train, steps_per_epoch=20, epochs=1, verbose=0, shuffle=False)
    after = pretrainer.evaluate(held, return_dict=True, verbose=0)
    assert after["masked_lm_loss"] < before["masked_lm_loss"] - 2.0, (before, after)
    assert after["loss"] < before["loss"] - 2.0


# The sub-command's own parser, so the test does not depend on the other pipelines.
RUN_PRETRAIN = (
    "import argparse, sys; from bert_keras_cli import pretrain; p = argparse.ArgumentParser(); "
    "pretrain.register(p.add_subparsers(dest='command')); a = p.parse_args(sys.argv[1:]); a.func(a)"
)


def pretrain_command(output):
    return [
        sys.executable,
        "-c",
        RUN_PRETRAIN,
        "pretrain",
        "--config",
        "tiny",
        "--vocab",
        str(VOCAB_FILE),
        "--corpus",
        str(SAMPLE),
        "--output",
        str(output),
        "--batch-size",
        "4",
        "--steps",
        "30",
        "--checkpoint-every",
        "5",
        "--warmup-steps",
        "5",
        "--learning-rate",
        "1e-3",
    ]


def completed(output):
    state = output / "checkpoints" / "phase1" / "state.json"
    try:
        return json.loads(state.read_text())["epoch"]
    except (OSError, ValueError):
        return 0


def optimizer_iterations(output):
    with h5py.File(output / "checkpoints" / "phase1" / "latest.weights.h5") as weights:
        return int(np.asarray(weights["optimizer"]["vars"]["0"]))


def run_in_process(output, flags):
    """`pretrain_command`'s run with `flags` changed, in this process (RUN_PRETRAIN's parser)."""
    from bert_keras_cli import pretrain

    args = pretrain_command(output)[3:]
    for flag, value in flags.items():
        args[args.index(flag) + 1] = value
    parser = argparse.ArgumentParser()
    pretrain.register(parser.add_subparsers(dest="command"))
    parsed = parser.parse_args(args)
    parsed.func(parsed)


@pytest.mark.slow
def test_sigkill_and_resume(tmp_path, capfd):
    require(SAMPLE)
    output = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        pretrain_command(output), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 240
    while completed(output) < 2 and process.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done = completed(output)
    assert 2 <= done < 6, "the run should have been killed mid-training"
    assert optimizer_iterations(output) >= done * 5  # optimizer state is in the checkpoint

    capfd.readouterr()
    run_in_process(output, {})  # the run again, as it was started
    log = "".join(capfd.readouterr())
    first_epoch = int(re.search(r"Epoch (\d+)/6", log).group(1))
    assert first_epoch == done + 1, log[-2000:]  # continues from the checkpoint
    assert f"resuming after step {done * 5} of 30" in log
    assert completed(output) == 6
    assert optimizer_iterations(output) == 30  # exactly the planned steps, none repeated
    assert (output / "final" / "encoder_hf" / "model.safetensors").exists()
    assert (output / "final" / "encoder_tf1" / "bert_model.ckpt.index").exists()
    restored = BertEncoder.from_checkpoint(output / "final" / "encoder.keras")
    assert restored.config.hidden_size == 128


def test_bad_inputs_are_clear_errors(tmp_path):
    from bert_keras_cli import create_pretraining_data

    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    create_pretraining_data.register(subparsers)
    parsed = parser.parse_args(
        [
            "create-pretraining-data",
            "--input",
            str(tmp_path / "none*.txt"),
            "--output",
            str(tmp_path / "o"),
            "--vocab",
            str(require(VOCAB_FILE)),
        ]
    )
    with pytest.raises(FileNotFoundError, match="no input files match"):
        parsed.func(parsed)


@pytest.mark.parametrize("no_nsp", [False, True])
def test_held_out_evaluation_at_every_checkpoint_and_no_nsp(tmp_path, no_nsp):
    """`--eval-corpus` is evaluated at each checkpoint with the same masks (the logged
    values are the final model's on those batches); `--no-nsp` trains masked LM alone
    and writes checkpoints without the next-sentence head."""
    from bert_keras.data.pretraining_inputs import PretrainingInputs
    from bert_keras_cli.cli import main
    from bert_keras_cli.plot import read_curves

    output = tmp_path / "run"
    held_out = tmp_path / "held_out.txt"
    held_out.write_text(require(DATA / "pretraining" / "gutenberg" / "austen-emma.txt").read_text()[:20000])
    argv = [
        "pretrain",
        "--config",
        one_layer_bert_config(tmp_path),
        "--vocab",
        str(require(VOCAB_FILE)),
        "--corpus",
        str(require(SAMPLE)),
        "--output",
        str(output),
        "--batch-size",
        "4",
        "--steps",
        "11",
        "--checkpoint-every",
        "5",
        "--warmup-steps",
        "1",
        "--learning-rate",
        "1e-3",
        "--eval-corpus",
        str(held_out),
        "--eval-steps",
        "3",
    ]
    assert main(argv + (["--no-nsp"] if no_nsp else [])) == 0
    curves = read_curves(output)
    validation = curves.series["masked_lm_loss"][("validation", "epoch")]
    # One evaluation per checkpoint, on step 5, 10 and 11: TensorBoard logs every 2 steps,
    # and Keras 3.15 alone drops the epoch metrics of an epoch ending on an odd step.
    assert len(validation) == 3
    assert (("validation", "epoch") in curves.series.get("next_sentence_accuracy", {})) == (not no_nsp)
    # The logged held-out loss is the final model's on the same masked batches.
    pretrainer = BertPretrainer.from_checkpoint(output / "final" / "pretrainer_tf1")
    assert pretrainer.next_sentence is not no_nsp
    pretrainer.compile()
    inputs = PretrainingInputs(BertTokenizer(str(VOCAB_FILE)), corpus=[str(held_out)], seq_length=128)
    batches = inputs.held_out(4, 3, tf.distribute.InputContext())
    # steps given: Keras 3.15's evaluate on a dataset of unknown length runs one more,
    # phantom step that our own loss means count (see the pipeline's validation_steps).
    result = pretrainer.evaluate(batches, return_dict=True, verbose=0, steps=3)
    np.testing.assert_allclose(result["masked_lm_loss"], validation[-1][1], rtol=1e-4)
    again = pretrainer.evaluate(batches, return_dict=True, verbose=0, steps=3)
    assert again["masked_lm_loss"] == result["masked_lm_loss"]  # masked once: the same batches
    # Each evaluation's fill-mask table (TensorBoard's reader and renderer) lists the masked
    # words of the first held-out instances and, at the last one, the final model's top words.
    samples = next(iter(batches))
    vocabulary = BertTokenizer(str(VOCAB_FILE)).vocabulary
    weights = samples["masked_lm_weights"].numpy()
    slots = [(row, slot) for row in range(len(weights)) for slot in np.flatnonzero(weights[row] > 0)]
    top = tf.math.top_k(tf.nn.softmax(pretrainer(samples, training=False)["mlm_logits"]), 5)
    tables = validation_summaries(output / "logs" / "phase1")["epoch_fill_mask"]
    assert sorted(tables) == [0, 1, 2]
    for plugin, markdown in tables.values():
        header, *rows = markdown_table(markdown)
        assert plugin == "text" and header == ["held-out text", "masked word", "top words"]
        assert [row[1] for row in rows] == [vocabulary[samples["masked_lm_ids"][r, s]] for r, s in slots]
        assert rows[0][0].startswith("[CLS] ") and "[MASK]" in rows[0][0]
    answers = [re.findall(r"(.+?) (\d\.\d\d)(?:, |$)", row[2]) for row in rows]
    assert [[word for word, _ in answer] for answer in answers] == [
        [vocabulary[i] for i in top.indices[r, s].numpy()] for r, s in slots
    ]
    np.testing.assert_allclose(
        [[float(p) for _, p in answer] for answer in answers], [top.values[r, s].numpy() for r, s in slots], atol=0.006
    )


def test_steps_not_a_multiple_of_checkpoint_every_and_a_changed_corpus_is_refused(tmp_path):
    """7 steps checkpointed every 5: a full interval, then one of 2 steps; the backup
    holds the optimizer after exactly 7 updates. The corpus then edited and the run asked
    for 9: it does not go on from a backup made on other text, and says which file
    changed. (In this process: RUN_PRETRAIN's parser.)"""
    from bert_keras.run_identity import RunChanged

    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(require(SAMPLE).read_bytes())
    flags = {
        "--corpus": str(corpus),
        "--steps": "7",
        "--checkpoint-every": "5",
        "--config": one_layer_bert_config(tmp_path),
    }
    run_in_process(tmp_path / "run", flags)
    assert completed(tmp_path / "run") == 2
    assert optimizer_iterations(tmp_path / "run") == 7
    assert (tmp_path / "run" / "final" / "encoder.keras").exists()
    with open(corpus, "a", encoding="utf-8") as text:
        text.write("\nA sentence added after the run.\nAnd another one.\n")
    with pytest.raises(RunChanged, match=f"other inputs or settings \\(corpus {corpus} changed \\(") as error:
        run_in_process(tmp_path / "run", {**flags, "--steps": "9"})
    assert str(tmp_path / "run" / "checkpoints" / "phase1") in str(error.value)
    assert optimizer_iterations(tmp_path / "run") == 7
