"""Shared test harness for the task heads, in the spirit of keras-hub's
`TestCase.run_*_test`: one tiny config, one `.keras` round-trip runner, and one task
runner (fit on raw text, predict, save/load, export) that every head's test applies.

The expectations come from outside the code under test: a loaded model must equal the
saved one weight for weight and output for output; an export must answer, through the
TF1 session loader that TF Serving uses, what the Keras model computes on the same text.
"""

import shutil
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bert_keras import BertConfig, BertEncoder, BertPreprocessor, BertTokenizer
from bert_keras.serving import export
from bert_keras.serving.ops import check_serving_ops
from bert_keras.serving.tfserving.session import SessionPredictor

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "a",
    "quick",
    "brown",
    "fox",
    "dog",
    "cat",
    "jump",
    "##s",
    "##ed",
    "over",
    "lazy",
    "good",
    "bad",
    "film",
    "is",
    "it",
    "was",
    "where",
    "who",
    "did",
    "go",
    "home",
    "john",
    "paris",
    "lives",
    "in",
    ",",
    ".",
    "!",
    "?",
    "中",
    "文",
]
TINY = BertConfig(
    vocab_size=len(VOCAB),
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=64,
)
# TINY of one layer, for tests of what sits above the encoder (heads, windows): each
# layer's trace costs CPU-seconds.
ONE_LAYER_TINY = BertConfig.from_dict({**TINY.to_dict(), "num_hidden_layers": 1})


def one_layer_bert_config(folder):
    """The path of a bert_config.json of BERT-Tiny (`--config tiny`, the bert-base vocabulary)
    with one layer, written into `folder`: for command runs whose test is not of depth."""
    path = Path(folder) / "bert_config.json"
    BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1).write_original_json(path)
    return str(path)


# An encoder config of odd sizes (vocabulary 99, feed-forward 37, 24 positions), for tests
# on random ids that a swapped dimension would fail.
ODD_TINY = BertConfig(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=24,
)
# The vocabulary of the tiny serving exports (tests/serving).
SERVING_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "quick",
    "brown",
    "fox",
    "##es",
    "jump",
    "##s",
    ",",
    ".",
    "!",
    "a",
    "b",
    "c",
    "中",
    "文",
]
# Texts a served model must answer without failing: empty, blank, 1 MB, invalid UTF-8, NUL
# bytes, scripts of other alphabets and the special tokens as text.
BAD_TEXTS = [
    "",
    "     ",
    "x" * (1 << 20),
    b"\xff\xfe invalid \xc3\x28 utf-8",
    "nul\x00bytes\x00",
    "emoji 🙂🙃 中文 עברית العربية",
    "[MASK] [CLS] [SEP]",
]
# Texts of many lengths, more than MIN_MICRO_BATCH of them, so that a request splits
# into several length-sorted micro-batches of different padded lengths.
VARIED_TEXTS = [
    " ".join(["the quick brown fox", "jumps !", "a b c", "中文"][: 1 + i % 4] * (1 + i % 7)) for i in range(37)
]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Hugging Face BertFor* folders and the outputs transformers computed for them
# (written by tests/fixtures/make_task_references.py).
TASK_FIXTURES = FIXTURES / "tasks"
TASK_REFERENCES = np.load(TASK_FIXTURES / "references.npz")
FAMILY_FIXTURES = FIXTURES / "families"  # DistilBERT and ELECTRA (tests/fixtures/make_family_references.py)
SERVING_RELEASE = "2.12"  # the op gate the exports must pass, as in test_export.py
TOLERANCE = 1e-5  # export vs Keras model, float32


def tiny_encoder(seed=0, config=TINY):
    keras.utils.set_random_seed(seed)
    return BertEncoder(config)


def tiny_preprocessor(seq_length=None, max_seq_length=32):
    return BertPreprocessor(BertTokenizer(VOCAB), seq_length=seq_length, max_seq_length=max_seq_length)


def random_inputs(batch=3, seq=11, config=ODD_TINY, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), "int32")
    mask[0, seq // 2 :] = 0
    return {
        "input_word_ids": rng.integers(0, config.vocab_size, (batch, seq)).astype("int32") * mask,
        "input_mask": mask,
        "input_type_ids": (rng.random((batch, seq)) < 0.5).astype("int32") * mask,
    }


def max_diff(actual, expected, mask=None):
    actual = keras.ops.convert_to_numpy(actual)
    if mask is not None:
        actual, expected = actual[mask], expected[mask]
    return float(np.abs(actual - expected).max())


def hf_folder(tmp_path, name, fixtures=TASK_FIXTURES):
    """A copy of the fixture folder with the shared vocab.txt beside it."""
    folder = tmp_path / name
    if not folder.exists():
        shutil.copytree(fixtures / name, folder)
        shutil.copy(fixtures / "vocab.txt", folder)
    return folder


def classifier_keras_file(tmp_path):
    """The fixture classifier (`hf_folder`'s sequence_single) as a `.keras` task file."""
    from bert_keras.serving.batch import load_model

    path = tmp_path / "classifier.keras"
    load_model(hf_folder(tmp_path, "sequence_single")).save(path)
    return path


def tiny_embedder_folder(folder):
    """A sentence-transformers folder of a tiny embedder."""
    from bert_keras import BertTextEmbedder

    BertTextEmbedder(tiny_encoder(), preprocessor=tiny_preprocessor()).save_checkpoint(folder)
    return folder


def assert_outputs_close(actual, expected, atol=TOLERANCE):
    """Nested dicts/arrays of outputs agree leaf for leaf (same keys, shapes)."""
    tf.nest.assert_same_structure(actual, expected)
    for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape, (a.shape, e.shape)
        np.testing.assert_allclose(a, e, atol=atol, rtol=0)


def run_serialization_test(model, inputs, tmp_path, predicted=None):
    """`.keras` round trip: same class and config, identical weights, identical
    predictions on `inputs` (raw text when the model has a preprocessor) to `predicted`,
    `model.predict(inputs)` when the caller has it already. Returns the loaded model."""
    path = tmp_path / f"{type(model).__name__}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model)
    assert loaded.get_config() == model.get_config()
    assert len(loaded.weights) == len(model.weights)
    for saved, restored in zip(model.weights, loaded.weights):
        assert saved.path == restored.path
        np.testing.assert_array_equal(saved.numpy(), restored.numpy())
    if predicted is None:
        predicted = model.predict(inputs, verbose=0)
    assert_outputs_close(loaded.predict(inputs, verbose=0), predicted, atol=0)
    return loaded


def run_task_test(
    model, tmp_path, predict_x, request, check_export, fit_data=None, export_kwargs=None, check_served=None
):
    """Everything a head must do, in order:

    1. `fit_data` = (x, y) raw: one epoch lowers nothing to NaN and changes the weights;
    2. `predict` on raw `predict_x` equals calling the model on its packed form;
    3. the `.keras` round trip (`run_serialization_test`);
    4. `export_for_serving` passes the op gate, loads in the TF1 session loader (which
       replays the warm-up requests), and `check_export(model, outputs)` holds for the
       answer to the raw-text `request` (a dict of input name -> strings); then
       `check_served(predictor)`, when given, runs a test's own checks on that loaded
       export (a second load costs CPU-seconds).
    Returns the export path."""
    if fit_data is not None:
        x, y = fit_data
        model.compile(optimizer=keras.optimizers.Adam(1e-3))
        before = [w.copy() for w in model.get_weights()]
        history = model.fit(x, y, batch_size=2, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"]).all()
        assert any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights())), "fit changed nothing"
    predicted = model.predict(predict_x, verbose=0)
    packed = model.preprocess_samples(_as_tensors(predict_x))
    assert_outputs_close(predicted, model(packed, training=False))
    run_serialization_test(model, predict_x, tmp_path, predicted)
    path = export.export_for_serving(model, model.preprocessor, tmp_path / "export", **(export_kwargs or {}))
    check_serving_ops(path, SERVING_RELEASE)
    predictor = SessionPredictor(path)
    assert len(predictor.warmup_responses) == 2, "the warm-up requests were not replayed"
    check_export(model, predictor.predict_texts(**request))
    if check_served is not None:
        check_served(predictor)
    predictor.close()
    return path


def _as_tensors(x):
    if isinstance(x, tuple):
        return tuple(_as_tensors(segment) for segment in x)
    if isinstance(x, (tf.Tensor, tf.RaggedTensor)):
        return x
    return tf.constant(x)


class Reached(Exception):
    """A command got to the library call a test replaced (`recorder`)."""


def recorder(monkeypatch, owner, name):
    """Replaces `owner.name` by a function that records its arguments and raises `Reached`:
    a command's flags as they reach the library, without running it."""
    calls = {}

    def record(*args, **kwargs):
        calls.update(kwargs, args=args)
        raise Reached

    monkeypatch.setattr(owner, name, record)
    return calls


def command_files(folder):
    """Tiny inputs of the training commands in `folder`: train.tsv, pairs.tsv, SST-2/,
    lines.txt and an empty init/."""
    (folder / "train.tsv").write_text("text\tlabel\na good film\tpos\na bad film\tneg\n", encoding="utf-8")
    (folder / "pairs.tsv").write_text("anchor\tpositive\nwho\tjohn\nwhere\tparis\n", encoding="utf-8")
    (folder / "SST-2").mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (folder / "SST-2" / name).write_text("sentence\tlabel\na good film\t1\na bad film\t0\n", encoding="utf-8")
    (folder / "lines.txt").write_text("a good film\n", encoding="utf-8")
    (folder / "init").mkdir()
    return folder


def validation_summaries(logs):
    """{tag: {step: value}} of a run's `logs/validation` (`logs`: a run's logs folder), as TensorBoard's own
    reader (`EventAccumulator`) loads them: scalars as floats, images as
    (plugin name, PNG bytes), texts as (plugin name, the markdown)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    accumulator = EventAccumulator(str(Path(logs) / "validation"), size_guidance={"tensors": 0})
    accumulator.Reload()
    summaries = {}
    for tag in accumulator.Tags()["tensors"]:
        plugin = accumulator.SummaryMetadata(tag).plugin_data.plugin_name
        for event in accumulator.Tensors(tag):
            value = make_ndarray(event.tensor_proto)
            if plugin == "scalars":
                value = float(value)
            elif plugin == "images":  # [width, height, PNG, ...]
                value = (plugin, value[2])
            else:
                value = (plugin, value.item().decode())
            summaries.setdefault(tag, {})[event.step] = value
    return summaries


def markdown_table(markdown):
    """The rows (lists of cell texts) of the markdown table TensorBoard's text dashboard
    renders from `markdown` (its own sanitized markdown renderer), header first."""
    import html.parser

    from tensorboard.plugin_util import markdown_to_safe_html

    class Cells(html.parser.HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.rows, self.cell = [], None

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            elif tag in ("td", "th"):
                self.cell = ""

        def handle_endtag(self, tag):
            if tag in ("td", "th"):
                self.rows[-1].append(self.cell)
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

    parser = Cells()
    parser.feed(markdown_to_safe_html(markdown))
    return parser.rows


def check_classifier_breakdown(out, labels, dev, logits, best_epoch, epochs, capsys):
    """What a fine-tuned classifier's run (in `out`, of classes `labels`) shows beyond its
    metric, against the kept model's `logits` of `dev` (examples: `texts`, label ids):
    `dev_predictions.tsv` holds its answers; every evaluation wrote to TensorBoard (read
    by TensorBoard's reader) its dev loss, a confusion matrix image, per-class precision, recall and F1,
    and the most confident wrong examples, and the best epoch's counts, scores and rows
    are those of the predictions file, counted here; `bert-keras plot` draws two more panels."""
    import io
    import json

    import pytest
    from PIL import Image

    from bert_keras_cli.cli import main as cli
    from bert_keras_cli.plot import COLUMNS, DPI, PANEL_INCHES, read_curves

    header, *lines = (out / "dev_predictions.tsv").read_text(encoding="utf-8").splitlines()
    assert header.split("\t") == ["dev_set", "guid", "text", "gold", "predicted", "confidence"]
    rows = [line.split("\t") for line in lines]
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    assert [row[2] for row in rows] == dev.texts[0]
    assert [row[3] for row in rows] == [labels[i] for i in dev.labels]
    assert [row[4] for row in rows] == [labels[i] for i in logits.argmax(-1)]
    np.testing.assert_allclose([float(row[5]) for row in rows], probabilities.max(-1), atol=2e-6)

    counts = {(gold, predicted): 0 for gold in labels for predicted in labels}
    for row in rows:
        counts[row[3], row[4]] += 1
    report = json.loads((out / "evaluations" / f"epoch-{best_epoch}.json").read_text())
    assert report["labels"] == list(labels)
    assert report["confusion"] == [[counts[gold, predicted] for predicted in labels] for gold in labels]

    summaries = validation_summaries(out / "logs")
    # The dev loss (the training loss on dev), as Keras writes the logs' `val_loss`.
    log_probabilities = logits - logits.max(-1, keepdims=True)
    log_probabilities -= np.log(np.exp(log_probabilities).sum(-1, keepdims=True))
    loss = -log_probabilities[np.arange(len(dev.labels)), dev.labels].mean()
    assert summaries["epoch_loss"][best_epoch - 1] == pytest.approx(loss, rel=1e-5)
    for epoch in range(epochs):
        plugin, png = summaries["epoch_confusion_matrix"][epoch]
        assert plugin == "images"
        assert Image.open(io.BytesIO(png)).size[0] > 100
        assert summaries["epoch_worst_errors"][epoch][0] == "text"
    step = best_epoch - 1
    for label in labels:
        correct = counts[label, label]
        gold = sum(counts[label, other] for other in labels)
        guessed = sum(counts[other, label] for other in labels)
        precision = correct / guessed if guessed else 0.0
        recall = correct / gold if gold else 0.0
        expected = {"precision": precision, "recall": recall}
        expected["f1"] = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        for metric, value in expected.items():
            assert summaries[f"epoch_{metric}/{label}"][step] == pytest.approx(value), (metric, label)
            assert report["per_class"][label][metric] == pytest.approx(value)

    wrong = [row for row in rows if row[3] != row[4]]
    assert wrong, "a tiny model trained a few steps gets some of its dev examples wrong"
    table = markdown_table(summaries["epoch_worst_errors"][step][1])
    assert table[0] == ["text", "gold", "predicted", "confidence"]
    # The 10 surest wrong rows with their confidences, surest first (a barely trained model's
    # may tie to the file's 6 decimals, so the order is checked on the table's own numbers).
    expected = {(" ".join(row[2].split()), row[3], row[4]): float(row[5]) for row in wrong}
    shown = {tuple(cells[:3]): float(cells[3]) for cells in table[1:]}
    assert len(shown) == min(10, len(expected)) and shown.keys() <= expected.keys()
    np.testing.assert_allclose([expected[key] for key in shown], list(shown.values()), atol=6e-5)
    assert all(value <= min(shown.values()) + 6e-5 for key, value in expected.items() if key not in shown)
    confidences = [float(cells[3]) for cells in table[1:]]
    assert confidences == sorted(confidences, reverse=True)

    capsys.readouterr()
    assert cli(["plot", str(out)]) == 0
    assert f"with the per-class scores of epoch {best_epoch} and its confusion matrix" in capsys.readouterr().out
    panels = len(read_curves(out).series) + 2
    with Image.open(out / "training_curves.png") as image:
        columns = min(COLUMNS, panels)
        assert image.size == (
            round(PANEL_INCHES[0] * columns * DPI),
            round(PANEL_INCHES[1] * -(-panels // columns) * DPI),
        )


def check_tagger_breakdown(out, sentences, predicted, best_epoch):
    """What a CoNLL-2003 tagger's run (in `out`) shows beyond its metric, against the kept
    model's tags `predicted` of the dev `sentences`: each entity type's scores, in
    TensorBoard (its own reader) and evaluations/, are conlleval's; the worst errors are
    every sentence the predictions get wrong (fewer than 10 here), with its wrong words as
    word/TAG, gold and predicted, surest first, as TensorBoard renders them."""
    import json

    import pytest

    from bert_keras.datasets.conll import conlleval

    step = best_epoch - 1
    scores = conlleval([s.tags for s in sentences], predicted)
    summaries = validation_summaries(out / "logs")
    report = json.loads((out / "evaluations" / f"epoch-{best_epoch}.json").read_text())
    assert list(scores["per_type"]) == report["labels"] and report["labels"]
    for kind, expected in scores["per_type"].items():
        assert report["per_class"][kind] == pytest.approx(expected)
        for metric, value in expected.items():
            assert summaries[f"epoch_{metric}/{kind}"][step] == pytest.approx(value)
    assert "epoch_confusion_matrix" not in summaries
    wrong = []
    for sentence, tags in zip(sentences, predicted):
        words = [i for i, (g, p) in enumerate(zip(sentence.tags, tags)) if g != p]
        if words:
            gold_words = " ".join(f"{sentence.words[i]}/{sentence.tags[i]}" for i in words)
            wrong.append(
                [" ".join(sentence.words), gold_words, " ".join(f"{sentence.words[i]}/{tags[i]}" for i in words)]
            )
    assert 0 < len(wrong) <= 10
    header, *rows = markdown_table(summaries["epoch_worst_errors"][step][1])
    assert header == ["text", "gold", "predicted", "confidence"]
    assert sorted(cells[:3] for cells in rows) == sorted(wrong)
    shown = [float(cells[3]) for cells in rows]
    assert shown == sorted(shown, reverse=True) and all(0 < value <= 1 for value in shown)
