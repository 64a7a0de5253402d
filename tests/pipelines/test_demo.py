"""`bert-keras demo`: the whole life cycle on Python's own documentation, on a small budget."""

import contextlib
import io
import json
import re
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.data.tfrecords import parse_example
from bert_keras.serving import export
from bert_keras.serving.tfserving.local_server import LocalModelServer
from bert_keras.serving.tfserving.session import SessionPredictor
from bert_keras_cli.cli import main as cli
from bert_keras_cli.demo import CLASSIFY_REQUESTS, FILL_MASK_REQUESTS, TASK_PACKAGES

SMALL = [
    *("--pretrain-steps", "12", "--pretrain-learning-rate", "1e-3", "--finetune-steps", "6"),
    *("--vocab-size", "600", "--batch-size", "8"),
]
ORIGINAL_FEATURES = {
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
}


class Killed(BaseException):
    """Stands for SIGKILL: the process stops at once, whatever it was doing."""


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo killed during its export (the first SavedModel written, not yet checked) and
    run again: its folder `out`, what both runs `printed`, what the second printed
    (`resumed`), the fine-tuned model's modification time after the first (`finetuned_at`)
    and the exports the first left (`left_behind`)."""
    out = tmp_path_factory.mktemp("demo")
    export_for_serving = export.export_for_serving

    def killed_once_written(*args, **kwargs):
        export_for_serving(*args, **kwargs)
        raise Killed

    first, second = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(first):
        patch.setattr(export, "export_for_serving", killed_once_written)
        with pytest.raises(Killed):
            cli(["demo", "--output-dir", str(out), *SMALL])
    finetuned_at = (out / "finetune" / "best.keras").stat().st_mtime_ns
    left_behind = sorted(path.name for path in (out / "serving").iterdir())
    with contextlib.redirect_stdout(second):
        assert cli(["demo", "--output-dir", str(out), *SMALL]) == 0
    printed = first.getvalue() + second.getvalue()
    return SimpleNamespace(
        out=out, printed=printed, resumed=second.getvalue(), finetuned_at=finetuned_at, left_behind=left_behind
    )


@pytest.mark.slow
def test_demo_writes_every_artefact(demo_run):
    out, printed = demo_run.out, demo_run.printed
    for number in range(1, 9):
        assert f"[{number}/8]" in printed
    # Pre-training was evaluated on held-out text at every checkpoint, kept out of training.
    held_out = (out / "corpus" / "held_out.txt").read_text(encoding="utf-8").strip().split("\n\n")
    trained = (out / "corpus" / "python_docs.txt").read_text(encoding="utf-8").strip().split("\n\n")
    assert len(held_out) > 10 and not set(held_out) & set(trained)
    assert list((out / "pretrain" / "logs" / "phase1" / "validation").glob("events.out.tfevents.*"))
    assert re.search(r"\$ bert-keras pretrain .* --learning-rate 0\.001 ", printed)
    # The summary's two accuracies are those of the two runs, from the same steps and seed.
    both = [
        json.loads((out / run / "best_metrics.json").read_text())["accuracy"] for run in ("finetune", "finetune_random")
    ]
    assert (
        f"what pre-training bought: dev accuracy {both[0]:.3f} fine-tuned from the pre-trained encoder, "
        f"{both[1]:.3f} from random weights"
    ) in printed

    # The text: Python's docs, and the package task with held-out docstrings of every class.
    corpus = (out / "corpus" / "python_docs.txt").read_text(encoding="utf-8")
    assert 'The "assert" statement' in corpus or "Assert statements are a convenient way" in corpus
    train = (out / "task" / "train.tsv").read_text(encoding="utf-8").splitlines()
    dev = (out / "task" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    assert train[0] == dev[0] == "text\tlabel"
    assert {line.rsplit("\t", 1)[1] for line in dev[1:]} == set(TASK_PACKAGES)
    assert not set(train[1:]) & set(dev[1:])
    # Docstrings of the task's packages stay out of the pre-training text.
    assert dev[1].rsplit("\t", 1)[0] not in corpus

    vocab = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(vocab) <= 600 and vocab[0] == "[PAD]" and {"[CLS]", "[SEP]", "[MASK]", "[UNK]"} <= set(vocab)

    # Pre-training data in the original create_pretraining_data layout.
    records = out / "pretraining_data" / "python_docs.tfrecord"
    example = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(str(records)))).numpy())
    assert set(example.features.feature) == ORIGINAL_FEATURES
    parsed = parse_example(next(iter(tf.data.TFRecordDataset(str(records)))), 64, 10)
    ids = parsed["input_word_ids"].numpy()
    assert vocab[ids[0]] == "[CLS]" and "[SEP]" in [vocab[i] for i in ids]

    # Pre-training checkpoints (the resume state) and the final weights in every format.
    state = json.loads((out / "pretrain" / "checkpoints" / "phase1" / "state.json").read_text())
    assert state["epoch"] == 6
    final = out / "pretrain" / "final"
    for name in (
        "encoder.keras",
        "encoder_hf/config.json",
        "encoder_tf1/bert_config.json",
        "pretrainer_tf1/bert_config.json",
    ):
        assert (final / name).exists(), name
    assert (out / "finetune" / "best.keras").exists()
    assert (out / "finetune" / "labels.txt").read_text().split() == sorted(TASK_PACKAGES)

    # TF Serving layout of both exports.
    for model in ("fill_mask", "docstring_package"):
        version = out / "serving" / model / "1"
        for name in (
            "saved_model.pb",
            "variables/variables.index",
            "assets/vocab.txt",
            "assets.extra/tf_serving_warmup_requests",
        ):
            assert (version / name).exists(), (model, name)


@pytest.mark.slow
def test_demo_answers_are_valid_served_predictions(demo_run):
    out, printed = demo_run.out, demo_run.printed
    fill_mask = SessionPredictor(out / "serving" / "fill_mask" / "1")
    answers = fill_mask.predict_texts(text=list(FILL_MASK_REQUESTS))
    fill_mask.close()
    vocab = set((out / "vocab.txt").read_text(encoding="utf-8").split("\n"))
    assert answers["top_tokens"].shape[0] == len(FILL_MASK_REQUESTS)
    assert all(token.decode() in vocab for token in answers["top_tokens"][:, 0].ravel())
    probabilities = answers["top_probabilities"][:, 0]
    assert np.all(np.isfinite(probabilities)) and np.all(np.diff(probabilities, axis=-1) <= 0)
    # What the demo printed is what the served model answers.
    first = ", ".join(f"{t.decode()} {p:.2f}" for t, p in zip(answers["top_tokens"][0, 0], probabilities[0]))
    assert f"-> {first}" in printed

    classifier = SessionPredictor(out / "serving" / "docstring_package" / "1")
    answers = classifier.predict_texts(text=list(CLASSIFY_REQUESTS))
    classifier.close()
    assert {label.decode() for label in answers["labels"]} <= set(TASK_PACKAGES)
    np.testing.assert_allclose(answers["probabilities"].sum(-1), 1.0, atol=1e-5)
    served = re.search(r"served dev accuracy ([0-9.]+) on (\d+) held-out docstrings", printed)
    dev_rows = len((out / "task" / "dev.tsv").read_text(encoding="utf-8").splitlines()) - 1
    assert served and int(served.group(2)) == dev_rows

    # The demo ends with the page's address: `bert-keras serve` as printed answers it, for the classifier.
    ending = re.search(
        r"bert-keras serve (\S+)\n.* in a browser: http://127\.0\.0\.1:8501(/models/\w+)$", printed, re.M
    )
    server = LocalModelServer(ending.group(1), grpc_port=0, rest_port=0).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.rest_port}{ending.group(2)}/info") as reply:
            info = json.loads(reply.read())
    finally:
        server.stop()
    assert (info["head_kind"], info["labels"]) == ("classifier", sorted(TASK_PACKAGES))


@pytest.mark.slow
def test_demo_run_again_resumes_instead_of_redoing(demo_run):
    """The run after the kill skips the six stages done and redoes the export, both models."""
    resumed = demo_run.resumed
    assert demo_run.left_behind == ["fill_mask"]  # the kill left an export unchecked
    assert resumed.count("done by an earlier run") == 6
    assert resumed.count("$ bert-keras export") == 2 and "$ bert-keras pretrain" not in resumed
    assert (demo_run.out / "finetune" / "best.keras").stat().st_mtime_ns == demo_run.finetuned_at
    assert (demo_run.out / ".done" / "export").exists()


@pytest.mark.slow
@pytest.mark.parametrize("format", ["litert", "onnx"])
def test_demo_classifier_exports_to_litert_and_onnx(demo_run, tmp_path, capsys, format):
    """Issue 43: the demo's classifier (four label names) through `bert-keras export
    --format`, which checks it against Keras (1e-4) and names the labels it answers."""
    import keras

    from bert_keras.serving import deploy

    out = demo_run.out
    model = keras.saving.load_model(out / "finetune" / "best.keras")
    path = tmp_path / f"demo.{format}"
    assert cli(["export", str(out / "finetune" / "best.keras"), "--format", format, "--out", str(path)]) == 0
    assert "largest difference from Keras: label_ids 0.00e+00, labels 0.00e+00" in capsys.readouterr().out
    texts = ["Return the number of items in a container.", "Open a file and return a stream."]
    want = [model.labels[i] for i in np.asarray(model.predict(np.array(texts), verbose=0)).argmax(-1)]
    runtime = deploy.predictor(format, path)
    if format == "litert":
        got = runtime(text=np.array(texts, dtype=object))["labels"]
    else:
        packed = model.preprocessor([tf.constant(texts)])
        got = runtime(**{name: value.numpy() for name, value in packed.items()})["labels"]
    assert [label.decode() if isinstance(label, bytes) else label for label in got] == want


def test_demo_init_needs_a_real_checkpoint(capsys, tmp_path):
    assert cli(["demo", "--output-dir", str(tmp_path / "out"), "--init", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err
