"""The feature-based CoNLL-2003 run (`train_feature_tagger`, `finetune conll --feature-based`)
on a tiny encoder and the first sentences of the real files: the encoder runs once over
the data whatever the epochs, the saved tagger tags raw words as the run scored them, and
bad layer lists are clear errors."""

import io
import json
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, require
from harness import check_tagger_breakdown, validation_summaries

from bert_keras import BertConfig, BertEncoder
from bert_keras.datasets.conll import ConllData, conlleval, predict_tags, read_conll
from bert_keras.recipes.feature_based import train_feature_tagger
from bert_keras.recipes.tagging_features import CACHE, cache_tagging_features
from bert_keras.tasks.feature_tagger import BertFeatureTagger
from bert_keras.training.backup import StepBackup
from bert_keras_cli.cli import main as cli

pytestmark = pytest.mark.slow  # most tests here take over 3 CPU-seconds (docs/development.md)

CONLL = DATA / "conll2003"


@pytest.fixture(scope="module")
def tiny_conll(tmp_path_factory):
    """(data folder of eng.train's first 80 and eng.testa's first 40 lines, a tiny encoder .keras)."""
    folder = tmp_path_factory.mktemp("conll")
    for split, lines in (("train", 80), ("testa", 40)):
        text = require(CONLL / f"eng.{split}").read_text().splitlines()[:lines]
        (folder / f"eng.{split}").write_text("\n".join(text) + "\n")
    init = folder / "encoder.keras"
    keras.utils.set_random_seed(0)
    BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=2)).save(init)
    return folder, init


def tagger(init, **arguments):
    return BertFeatureTagger.from_checkpoint(
        init, vocab=require(DATA / "vocab" / "vocab.txt"), seq_length=None, num_classes=9, lstm_units=8, **arguments
    )


def count_encoded_rows(model):
    """A variable counting the rows the model's encoder runs on, in graphs as eagerly."""
    rows = tf.Variable(0, dtype=tf.int64, trainable=False)
    call = model.encoder.call

    def counted(inputs, *args, **kwargs):
        rows.assign_add(tf.shape(inputs["input_word_ids"], out_type=tf.int64)[0])
        return call(inputs, *args, **kwargs)

    model.encoder.call = counted
    return rows


def test_features_are_computed_once_and_the_saved_tagger_tags_as_scored(tiny_conll, tmp_path):
    folder, init = tiny_conll
    data = ConllData(folder)
    model = tagger(init, layers=[-1, "embeddings"], combine="weighted")
    rows = count_encoded_rows(model)
    run = train_feature_tagger(model, data, output_dir=tmp_path, epochs=3, batch_size=4, eval_batch_size=8, verbose=0)
    assert int(rows.numpy()) == data.train_size + data.dev_size  # once, for 3 epochs of training and scoring
    assert len(run.evaluations) == 4 and run.evaluations[-1]["cache_seconds"] >= 0
    loaded = keras.saving.load_model(tmp_path / "best.keras")
    gold = read_conll(folder / "eng.testa")
    predicted = predict_tags(loaded, gold, 8)  # from raw words, the encoder run again
    assert conlleval([s.tags for s in gold], predicted)["f1"] == pytest.approx(run.best["f1"])
    lines = [line.split()[2] for line in (tmp_path / "predictions.txt").read_text().splitlines() if line]
    assert lines == [tag for tags in predicted for tag in tags]


def test_a_cache_of_all_layers_serves_each_choice(tiny_conll):
    folder, init = tiny_conll
    data = ConllData(folder, max_examples=6)
    everything = tagger(init, layers=["embeddings", 0, 1])
    cache = cache_tagging_features(everything, data, verbose=0)
    last_two = tagger(init, layers=[-1, -2])
    alone = cache_tagging_features(last_two, data, verbose=0)
    picked = cache.select(last_two.hidden_states)
    for a, b in zip(picked.train.features + picked.dev.features, alone.train.features + alone.dev.features):
        assert a.shape == b.shape and abs(a.astype("float32") - b.astype("float32")).max() < 1e-2  # float16
    assert [t.tolist() for t in picked.train.targets] == [t.tolist() for t in alone.train.targets]
    with pytest.raises(ValueError, match="holds hidden states"):
        alone.select([0])


def test_finetune_conll_feature_based_command(tiny_conll, tmp_path, capsys):
    folder, init = tiny_conll
    vocab = str(require(DATA / "vocab" / "vocab.txt"))
    common = ["finetune", "conll", "--data-dir", str(folder), "--init", str(init), "--vocab", vocab, "--verbose", "0"]
    flags = ["--feature-based=-1,-2", "--combine", "concat", "--lstm-units", "8", "--batch-size", "4", "--epochs", "2"]
    assert cli([*common, "--output-dir", str(tmp_path / "run"), *flags]) == 0
    assert "feature-based: layers [-1, -2] (concat), BiLSTM 2x8" in capsys.readouterr().out
    history = json.loads((tmp_path / "run" / "eval_results.json").read_text())
    assert [h["epoch"] for h in history[:2]] == [1, 2]
    loaded = keras.saving.load_model(tmp_path / "run" / "best.keras")
    assert isinstance(loaded, BertFeatureTagger) and loaded.hidden_states == [2, 1]
    best = json.loads((tmp_path / "run" / "best_metrics.json").read_text())
    assert best["f1"] == max(h["f1"] for h in history[:2])
    # Each evaluation reported as finetune's are; the best epoch's per-type scores and worst
    # errors are those of its predictions.txt.
    assert sorted(path.name for path in (tmp_path / "run" / "evaluations").iterdir()) == [
        "epoch-1.json",
        "epoch-2.json",
    ]
    blocks = (tmp_path / "run" / "predictions.txt").read_text().split("\n\n")
    predicted = [[line.split()[2] for line in block.splitlines()] for block in blocks if block.strip()]
    check_tagger_breakdown(tmp_path / "run", read_conll(folder / "eng.testa"), predicted, best["epoch"])
    for layers, message in (("=5", "out of range"), ("=,", "none given")):
        assert cli([*common, "--output-dir", str(tmp_path / layers[1:]), f"--feature-based{layers}"]) != 0
        assert message in capsys.readouterr().err
    for flag in (["--bias-correction"], ["--reinit-layers", "1"]):  # the fine-tuning recipe's, not the BiLSTM's
        assert cli([*common, "--output-dir", str(tmp_path / "stable"), "--feature-based=-1", *flag]) == 2
        assert f"{flag[0]} is not for it" in capsys.readouterr().err


class Killed(Exception):
    """Stands for SIGKILL."""


def npz_bytes(**arrays):
    file = io.BytesIO()
    np.savez(file, **arrays)
    return file.getvalue()


def killed_after(step):
    original = StepBackup.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        original(self, batch, logs)
        if int(self.model.optimizer.iterations.numpy()) == step:
            raise Killed

    return on_train_batch_end


def train(init, data, output_dir, **options):
    keras.utils.set_random_seed(0)
    model = tagger(init, layers=[-1, -2], combine="weighted")
    arguments = dict(output_dir=output_dir, epochs=2, batch_size=4, eval_batch_size=8, backup_steps=2, verbose=0)
    return train_feature_tagger(model, data, **{**arguments, **options}), model


def test_max_train_steps_stops_after_that_many_optimizer_steps(tiny_conll, tmp_path, monkeypatch):
    """3 steps of epochs of 2 batches (5 sentences, 4 a batch): a whole epoch, then the first
    step of the second, scored after each."""
    folder, init = tiny_conll
    data = ConllData(folder)
    steps, record = [], StepBackup.on_train_batch_end

    def counted(self, batch, logs=None):
        steps.append(int(self.model.optimizer.iterations.numpy()))
        record(self, batch, logs)

    monkeypatch.setattr(StepBackup, "on_train_batch_end", counted)
    run, _ = train(init, data, tmp_path, epochs=3, max_train_steps=3)
    assert data.train_size == 5 and steps == [1, 2, 3]
    assert [e["epoch"] for e in run.evaluations[:-1]] == [1, 2]


def folder_copied_after(step, folder, copy):
    """`StepBackup.on_train_batch_end` that, after optimizer step `step`, copies `folder` to
    `copy`: the files a run killed there leaves, while the run goes on."""
    original = StepBackup.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        original(self, batch, logs)
        if int(self.model.optimizer.iterations.numpy()) == step:
            shutil.copytree(folder, copy)

    return on_train_batch_end


@pytest.mark.slow
def test_a_killed_run_resumes_on_its_stored_features_as_if_it_had_not_stopped(tiny_conll, tmp_path, monkeypatch):
    """Killed after step 3 of 2 epochs of 2 (backed up after step 2), then run again: the
    features are read back, not computed, and the run ends with the uninterrupted one's
    weights, dev F1 and reports. The killed run is the uninterrupted one's folder as it was
    after step 3, resumed in the same place once that run is moved aside."""
    folder, init = tiny_conll
    data = ConllData(folder, max_examples=16)
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(StepBackup, "on_train_batch_end", folder_copied_after(3, run, tmp_path / "killed"))
        whole, _ = train(init, data, run, max_train_steps=4)
    run.rename(tmp_path / "whole")
    (tmp_path / "killed").rename(run)
    assert (run / CACHE).exists() and (run / CACHE.parent / "state.json").exists()
    keras.utils.set_random_seed(0)
    model = tagger(init, layers=[-1, -2], combine="weighted")
    rows = count_encoded_rows(model)
    resumed = train_feature_tagger(
        model,
        data,
        output_dir=run,
        epochs=2,
        batch_size=4,
        eval_batch_size=8,
        backup_steps=2,
        max_train_steps=4,
        verbose=0,
    )
    assert int(rows.numpy()) == 0  # the stored features
    assert [e["f1"] for e in resumed.evaluations[:-1]] == [e["f1"] for e in whole.evaluations[:-1]]
    for got, want in zip(resumed.model.get_weights(), whole.model.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-6)
    assert not (tmp_path / "run" / "checkpoints").exists()
    # Its reports too: each epoch's once, as the uninterrupted run's (TensorBoard's reader).
    assert validation_summaries(tmp_path / "run" / "logs") == validation_summaries(tmp_path / "whole" / "logs")


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "not a whole feature cache"),
        (b"PK\x03\x04 cut", "not a whole feature cache"),
        (npz_bytes(features=np.zeros(3)), "not a whole feature cache"),  # another program's .npz
        ([-1], r"hidden_states: \[2\] there, \[2, 1\] now"),  # the cache of other layers (layer indices)
        ([-1, -2], r"dev_examples: \"[0-9a-f]{64}\" there, \"[0-9a-f]{64}\" now"),  # a dev word edited
    ],
)
def test_a_bad_stored_feature_cache_is_an_error_naming_it(tiny_conll, tmp_path, content, problem):
    folder, init = tiny_conll
    data = ConllData(folder, max_examples=4)
    path = tmp_path / CACHE
    if isinstance(content, list):  # the cache a stopped run stored with these layers
        keras.utils.set_random_seed(0)
        with pytest.raises(Killed):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(StepBackup, "on_train_batch_end", killed_after(1))
                train_feature_tagger(tagger(init, layers=content), data, output_dir=tmp_path, batch_size=4, verbose=0)
        if content == [-1, -2]:  # the dev file edited in place: as many sentences, one word other
            edited = tmp_path / "edited"
            shutil.copytree(folder, edited)
            testa = (edited / "eng.testa").read_text()
            first = next(line.split()[0] for line in testa.splitlines() if line.split() and "DOCSTART" not in line)
            (edited / "eng.testa").write_text(testa.replace(first, first + "s", 1))
            data = ConllData(edited, max_examples=4)
    else:
        path.parent.mkdir()
        path.write_bytes(content)
    with pytest.raises(ValueError, match=f"^{path}[: ][^\n]*{problem}[^\n]*$"):
        train(init, data, tmp_path)
