"""Every training command resumes after a kill: a run stopped at a step (inside an epoch,
after a backup and before the next) and run again with the same command ends with the
same dev metrics, weights and logged steps as an uninterrupted run with the same seed,
no step logged twice; another command line into its folder is refused, naming what
differs."""

import gc
import json
import re
import shutil
from collections import Counter

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, VOCAB_FILE, require
from harness import tiny_preprocessor

from bert_keras import BertClassifier, BertConfig, BertEncoder
from bert_keras.training.backup import StepBackup
from bert_keras_cli.cli import main as cli

# 12 training examples, batches of 4: epochs of 3 steps; backups every 2 steps and at
# epoch ends (steps 2, 3, 4, 6); killed after step 5, the run resumes inside epoch 2.
KILL_AFTER = 5
COMMON = ["--batch-size", "4", "--epochs", "2", "--backup-steps", "2", "--verbose", "0", "--eval-batch-size", "4"]


class Killed(Exception):
    """Stands for SIGKILL: the process stops at once, whatever it was doing."""


def sst2_rows(count):
    return require(DATA / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1 : count + 1]


def tiny_encoder_file(folder):
    path = folder / "encoder.keras"
    BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1)).save(path)
    return ["--init", str(path), "--vocab", str(require(VOCAB_FILE))]


def tsv(folder):
    rows = sst2_rows(20)
    (folder / "train.tsv").write_text("text\tlabel\n" + "\n".join(rows[:12]) + "\n", encoding="utf-8")
    (folder / "dev.tsv").write_text("text\tlabel\n" + "\n".join(rows[12:]) + "\n", encoding="utf-8")
    return ["finetune", "tsv", "--train", str(folder / "train.tsv"), "--dev", str(folder / "dev.tsv")]


def glue(folder):
    """The data in a folder of its own: a folder input is every file in it, runs beside it included."""
    rows, folder = sst2_rows(20), folder / "glue"
    folder.mkdir()
    (folder / "train.tsv").write_text("sentence\tlabel\n" + "\n".join(rows[:12]) + "\n", encoding="utf-8")
    (folder / "dev.tsv").write_text("sentence\tlabel\n" + "\n".join(rows[12:]) + "\n", encoding="utf-8")
    return ["finetune", "glue", "--task", "sst-2", "--data-dir", str(folder)]


def conll(folder):
    folder = folder / "conll"
    folder.mkdir()
    for split in ("train", "testa"):
        lines = require(DATA / "conll2003" / f"eng.{split}").read_text().splitlines()[:200]
        (folder / f"eng.{split}").write_text("\n".join(lines) + "\n")
    return ["finetune", "conll", "--data-dir", str(folder), "--max-examples", "12"]


def squad(folder):
    dev = str(require(DATA / "squad" / "dev-v1.1.json"))
    articles = ["--train-articles", "0:1", "--predict-articles", "47:48", "--max-examples", "12"]
    return ["finetune", "squad", "--train-file", dev, "--predict-file", dev, *articles, "--max-seq-length", "96"]


def pairs(folder):
    rows = [row.split("\t")[0] for row in sst2_rows(24)]
    (folder / "pairs.tsv").write_text(
        "anchor\tpositive\n" + "".join(f"{a}\t{b}\n" for a, b in zip(rows[::2], rows[1::2])), encoding="utf-8"
    )
    return folder / "pairs.tsv"


def embedder(folder):
    return ["finetune", "embedder", "--train", str(pairs(folder)), "--dev", str(pairs(folder))]


def reranker(folder):
    rows = [row.split("\t") for row in sst2_rows(12)]
    (folder / "scored.tsv").write_text(
        "query\tdocument\tlabel\n" + "".join(f"is it good ?\t{text}\t{label}\n" for text, label in rows),
        encoding="utf-8",
    )
    return ["finetune", "reranker", "--train", str(folder / "scored.tsv"), "--dev", str(folder / "scored.tsv")]


def distill(folder):
    keras.utils.set_random_seed(0)
    teacher = BertClassifier(
        BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=2)),
        2,
        preprocessor=tiny_preprocessor(),
        labels=["0", "1"],
    )
    teacher.save(folder / "teacher.keras")
    command = tsv(folder)[2:]
    return ["distill", "--teacher", str(folder / "teacher.keras"), "--student", "teacher:1", *command]


COMMANDS = {"tsv": tsv, "glue": glue, "conll": conll, "squad": squad, "embedder": embedder, "reranker": reranker}


def command(kind, folder):
    if kind == "distill":
        return [*distill(folder), *COMMON]
    return [*COMMANDS[kind](folder), *tiny_encoder_file(folder), *COMMON]


def tensorboard_callbacks(model):
    """The TensorBoard callbacks of `model`'s running `fit`. Not those of earlier tests: a test
    that raised out of `fit` leaves its callback's writer pushed below this run's, and popping
    that one first would leave this run's to pop onto no writer."""
    return [
        callback
        for callback in gc.get_objects()
        if isinstance(callback, keras.callbacks.TensorBoard) and callback.model is model
    ]


def tensorboard_writers(model):
    """The summary writers of `model`'s running TensorBoard callbacks."""
    return [writer for callback in tensorboard_callbacks(model) for writer in callback._writers.values()]


def kill_after(step):
    """Makes the next run die right after training `step` (backups before it are kept),
    its logs written as far as the process had got (as a killed process leaves them: no
    writer of the dead run left to write later, in this process)."""
    original = StepBackup.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        original(self, batch, logs)
        if int(self.model.optimizer.iterations.numpy()) == step:
            for callback in tensorboard_callbacks(self.model):
                # A killed process leaves no default summary writer behind; this one goes on to other tests.
                while callback._prev_summary_state:
                    callback._pop_writer()
            for writer in tensorboard_writers(self.model):
                writer.close()
            raise Killed(f"killed after step {step}")

    return on_train_batch_end


def copy_after(step, folder, copy):
    """Makes the next run copy its `folder` to `copy` right after training `step`, where
    `kill_after(step)` kills it, its logs written out as far as it has got: the files a run
    killed there leaves, without training a second run up to the kill. The run goes on."""
    original = StepBackup.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        original(self, batch, logs)
        if int(self.model.optimizer.iterations.numpy()) == step:
            for writer in tensorboard_writers(self.model):
                writer.flush()
            shutil.copytree(folder, copy)

    return on_train_batch_end


def scalars(folder):
    """[(file kind, tag, step, value)] of the TensorBoard scalars under `folder` (per-class
    scores included; not the images and texts beside them)."""
    found = []
    for path in sorted(folder.rglob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                array = tf.make_ndarray(value.tensor)
                if array.shape == () and array.dtype.kind in "fiu":
                    found.append((path.parent.name, value.tag, event.step, float(array)))
    return found


def weights(path):
    return keras.saving.load_model(path).get_weights()


@pytest.mark.slow
@pytest.mark.parametrize("kind", [*COMMANDS, "distill"])
def test_a_killed_run_resumes_as_if_it_had_not_stopped(kind, tmp_path, monkeypatch, capsys):
    """`tsv` is killed after step KILL_AFTER; the other commands resume from the files their
    uninterrupted run had written by then (`copy_after`: the same files, one run fewer), in
    the same folder, as the command line records it."""
    whole, resumed, killed = tmp_path / "whole", tmp_path / "resumed", tmp_path / "killed"
    argv = command(kind, tmp_path)
    if kind == "tsv":
        assert cli([*argv, "--output-dir", str(whole)]) == 0
        with monkeypatch.context() as patch:
            patch.setattr(StepBackup, "on_train_batch_end", kill_after(KILL_AFTER))
            with pytest.raises(Killed):
                cli([*argv, "--output-dir", str(resumed)])
    else:
        with monkeypatch.context() as patch:
            patch.setattr(StepBackup, "on_train_batch_end", copy_after(KILL_AFTER, resumed, killed))
            assert cli([*argv, "--output-dir", str(resumed)]) == 0
        resumed.rename(whole)
        killed.rename(resumed)
    capsys.readouterr()
    assert cli([*argv, "--output-dir", str(resumed)]) == 0
    assert re.search(r"^resuming after step 4 of \d+$", capsys.readouterr().out, re.M)

    assert sorted(path.name for path in resumed.iterdir()) == sorted(path.name for path in whole.iterdir())
    expected, actual = (json.loads((run / "eval_results.json").read_text())[:-1] for run in (whole, resumed))
    assert [sorted(epoch) for epoch in actual] == [sorted(epoch) for epoch in expected] and len(actual) == 2
    for got, want in zip(actual, expected):
        np.testing.assert_allclose([got[key] for key in sorted(want)], [want[key] for key in sorted(want)], atol=1e-5)
    for got, want in zip(weights(resumed / "best.keras"), weights(whole / "best.keras")):
        np.testing.assert_allclose(got, want, atol=1e-5)
    logged, reference = scalars(resumed / "logs"), scalars(whole / "logs")
    assert not [key for key, count in Counter(entry[:3] for entry in logged).items() if count > 1]
    assert sorted(entry[:3] for entry in logged) == sorted(entry[:3] for entry in reference)
    values = dict((entry[:3], entry[3]) for entry in reference)
    for entry in logged:
        if "steps_per_second" not in entry[1]:
            assert entry[3] == pytest.approx(values[entry[:3]], rel=1e-4, abs=1e-5), entry


@pytest.mark.slow
def test_another_command_line_or_changed_data_is_refused_naming_what_differs(tmp_path, monkeypatch, capsys):
    argv = command("tsv", tmp_path)
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(StepBackup, "on_train_batch_end", kill_after(3))
        with pytest.raises(Killed):
            cli([*argv, "--output-dir", str(out)])
    capsys.readouterr()
    stable = ["--bias-correction", "--reinit-layers", "1"]
    assert cli([*argv, "--output-dir", str(out), "--learning-rate", "1e-3", "--seed", "3", *stable]) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {out} (fine-tuning run) holds the unfinished run of other inputs or settings (" in err
    assert "(--bias-correction false there, true now; --learning-rate 2e-05 there, 0.001 now; " in err
    assert "--reinit-layers 0 there, 1 now; --seed 0 there, 3 now)" in err
    with open(tmp_path / "train.tsv", "a", encoding="utf-8") as train:  # a line added to the data
        train.write(sst2_rows(21)[-1] + "\n")
    assert cli([*argv, "--output-dir", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"(train {tmp_path / 'train.tsv'} changed (" in line
    assert line.endswith("run the same command on the same files to resume it, or pass --overwrite to start over")
    record = out / "checkpoints" / "command.json"
    record.write_bytes(record.read_bytes()[:10])  # cut short
    assert cli([*argv, "--output-dir", str(out)]) == 2
    assert f"{record}: not a run record" in capsys.readouterr().err
    assert cli([*argv, "--output-dir", str(out), "--learning-rate", "1e-3", "--overwrite"]) == 0
    assert "resuming" not in capsys.readouterr().out
    assert not (out / "checkpoints").exists()


def test_the_backup_interval_flag_defaults_to_the_librarys():
    from bert_keras.recipes.finetuning import BACKUP_STEPS
    from bert_keras_cli.arguments import BACKUP_STEPS as FLAG_DEFAULT

    assert FLAG_DEFAULT == BACKUP_STEPS


@pytest.mark.slow
def test_a_resumed_cached_teacher_run_computes_the_teachers_logits_once(tmp_path, monkeypatch, capsys):
    """`distill --cache-teacher` of 3 epochs killed inside epoch 2 and run again: the
    teacher runs over the 12 training examples once in the resumed run, which builds the
    batches twice (the rest of epoch 2, then epoch 3)."""
    from bert_keras.tasks.task import BertTask

    argv = [*command("distill", tmp_path), "--cache-teacher", "--epochs", "3", "--output-dir", str(tmp_path / "run")]
    over_the_training_set = []
    predict = BertTask.predict

    def counted(self, x, *args, **kwargs):
        over_the_training_set.append(len(tf.nest.flatten(x)[0]) == 12)
        return predict(self, x, *args, **kwargs)

    monkeypatch.setattr(BertTask, "predict", counted)
    with monkeypatch.context() as patch:
        patch.setattr(StepBackup, "on_train_batch_end", kill_after(KILL_AFTER))
        with pytest.raises(Killed):
            cli(argv)
    del over_the_training_set[:]
    assert cli(argv) == 0
    assert re.search(r"^resuming after step 4 of 9$", capsys.readouterr().out, re.M)
    assert sum(over_the_training_set) == 1
