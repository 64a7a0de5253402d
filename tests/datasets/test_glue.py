"""GLUE readers on every row of the real files and on each task's layout, the official
metrics on hand-computed cases, and a tiny end-to-end `bert-keras finetune glue` run."""

import json

import keras
import numpy as np
import pytest
from conftest import DATA, require
from harness import check_classifier_breakdown

from bert_keras.datasets.glue import TASKS, glue_metrics, read_split, write_submission
from bert_keras.datasets.metrics import accuracy, average_ranks, f1, matthews_corrcoef, pearson, spearman
from bert_keras_cli.cli import main as cli

GLUE = DATA / "glue"


@pytest.mark.parametrize(
    "task, folder, split, rows, first, label",
    [
        ("sst-2", "SST-2", "train", 67349, "hide new secretions from the parental units ", 0),
        ("sst-2", "SST-2", "dev", 872, "it 's a charming and often affecting journey . ", 1),
        ("cola", "CoLA", "train", 8551, "Our friends won't buy this analysis, let alone the next one we propose.", 1),
        ("cola", "CoLA", "dev", 1043, "The sailors rode the breeze clear of the rocks.", 1),
        ("rte", "RTE", "train", 2490, "No Weapons of Mass Destruction Found in Iraq Yet.", 1),
        (
            "rte",
            "RTE",
            "dev",
            277,
            "Dana Reeve, the widow of the actor Christopher Reeve, has died of lung cancer "
            "at age 44, according to the Christopher Reeve Foundation.",
            1,
        ),
        (
            "mrpc",
            "MRPC",
            "train",
            3668,
            'Amrozi accused his brother, whom he called "the witness", of deliberately distorting his evidence.',
            1,
        ),
        (
            "mrpc",
            "MRPC",
            "dev",
            408,
            "He said the foodservice pie business doesn't fit the company's long-term growth strategy.",
            1,
        ),
    ],
)
def test_reader_parses_every_row_of_the_real_files(task, folder, split, rows, first, label):
    examples = read_split(require(GLUE / folder / f"{split}.tsv"), task)
    assert len(examples) == len(examples.labels) == rows
    assert examples.texts[0][0] == first and examples.labels[0] == label
    assert set(examples.labels) == {0, 1}
    assert all(len(segment) == rows for segment in examples.texts)


def test_real_mrpc_keeps_bare_quotes_and_reads_the_test_file():
    dev = read_split(require(GLUE / "MRPC" / "dev.tsv"), "mrpc")
    # The BOM is gone from the header and a leading '"' is text, not CSV quoting.
    assert dev.texts[1][0] == '"The foodservice pie business does not fit our long-term growth strategy.'
    test = read_split(GLUE / "MRPC" / "test.tsv", "mrpc", test=True)
    assert len(test) == 1725 and test.labels is None and test.guids[:2] == ["0", "1"]
    assert test.texts[0][0].startswith("PCCW's chief operating officer")


LAYOUTS = {
    "sts-b": (
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
        "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\t"
        "A plane is taking off.\tAn air plane is taking off.\t5.000",
        ("A plane is taking off.", "An air plane is taking off."),
        5.0,
    ),
    "qqp": (
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
        "133273\t213221\t213222\tHow is the life of a math student?\tWhich level of prepration is enough?\t0",
        ("How is the life of a math student?", "Which level of prepration is enough?"),
        0,
    ),
    "mnli": (
        "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse"
        "\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label",
        "0\t31193\t31193n\tgovernment\t( ( x ) )\t( y )\t(ROOT x)\t(ROOT y)\tConceptually cream skimming has "
        "two basic dimensions.\tProduct and geography are what make cream skimming work. \tneutral\tneutral",
        (
            "Conceptually cream skimming has two basic dimensions.",
            "Product and geography are what make cream skimming work. ",
        ),
        2,
    ),
    "qnli": (
        "index\tquestion\tsentence\tlabel",
        "0\tWhen did the third Digimon series begin?\tUnlike the two seasons before it, ...\tnot_entailment",
        ("When did the third Digimon series begin?", "Unlike the two seasons before it, ..."),
        1,
    ),
    "wnli": (
        "index\tsentence1\tsentence2\tlabel",
        "0\tI stuck a pin through a carrot.\tThe carrot has a hole.\t1",
        ("I stuck a pin through a carrot.", "The carrot has a hole."),
        1,
    ),
}


@pytest.mark.parametrize("task", sorted(LAYOUTS))
def test_every_task_layout_with_bom_crlf_and_no_final_newline(task, tmp_path):
    header, row, texts, label = LAYOUTS[task]
    path = tmp_path / "dev.tsv"
    path.write_bytes(("\ufeff" + header + "\r\n" + row + "\r\n" + row).encode("utf-8"))
    examples = read_split(path, task)
    assert len(examples) == 2 and examples.guids[0] in ("0", "133273")
    assert tuple(segment[0] for segment in examples.texts) == texts
    assert examples.labels == [label, label]


def test_malformed_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\ngood\t1\nno label here\nbad\t0\n")
    with pytest.raises(ValueError, match=r"train.tsv:3: malformed line: 1 tab-separated fields, expected 2"):
        read_split(path, "sst-2")
    path.write_text("sentence\tlabel\ngood\t1\nbad\tnegative\n")
    with pytest.raises(ValueError, match=r"train.tsv:3: label 'negative' is not one of \['0', '1'\]"):
        read_split(path, "sst-2")
    path.write_text(
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
        "0\tg\tf\ty\t1\tn\tn\ta\tb\tfive\n"
    )
    with pytest.raises(ValueError, match=r"train.tsv:2: score 'five' is not a number"):
        read_split(path, "sts-b")
    with pytest.raises(FileNotFoundError, match="no TSV file"):
        read_split(tmp_path / "missing.tsv", "rte")
    with pytest.raises(ValueError, match="unknown GLUE task"):
        read_split(path, "squad")


def test_metrics_on_hand_computed_cases():
    labels = [1, 1, 1, 0, 0, 0, 1, 0]
    predictions = [1, 0, 1, 0, 1, 0, 1, 1]
    # tp 3, fn 1, fp 2, tn 2.
    assert accuracy(labels, predictions) == pytest.approx(5 / 8)
    assert f1(labels, predictions) == pytest.approx(6 / 9)
    assert matthews_corrcoef(labels, predictions) == pytest.approx(4 / 240**0.5)
    assert matthews_corrcoef(labels, [1] * 8) == 0.0
    assert f1([0, 0], [0, 0]) == 0.0
    x, y = [1, 2, 3, 4, 5], [2, 4, 5, 4, 5]
    assert pearson(x, y) == pytest.approx(6 / 60**0.5)
    np.testing.assert_array_equal(average_ranks(y), [1, 2.5, 4.5, 2.5, 4.5])
    assert spearman(x, y) == pytest.approx(7 / 90**0.5)
    assert glue_metrics("cola", labels, predictions)["mcc"] == pytest.approx(4 / 240**0.5)
    assert set(glue_metrics("mrpc", labels, predictions)) == {"accuracy", "f1"}
    assert set(glue_metrics("sts-b", x, y)) == {"pearson", "spearman"}
    with pytest.raises(ValueError, match="non-empty 1-D"):
        accuracy([1, 0], [1])


@pytest.mark.slow  # two tiny models' predictions: 10 s
def test_dev_evaluation_reports_each_dev_sets_mean_loss_as_keras_computes_it(tmp_path):
    """Beside the official metrics, the mean loss of each dev set: MNLI's two (prefixed like
    their metrics) the softmax cross-entropy of the logits, STS-B's the squared error of
    the scores, as Keras' own losses compute them on the same outputs."""
    from fixture_models import CONFIG, FIXTURE_VOCAB, tiny_classifier

    from bert_keras import BertClassifier, BertEncoder, BertPreprocessor, BertTokenizer
    from bert_keras.datasets.glue import glue_data

    sentences = ["the quick brown foxes jump", "a lazy dog!", "the dog", "unknown words, b", "fox"]
    for task, names, labels in [
        ("mnli", ("dev_matched.tsv", "dev_mismatched.tsv"), ("contradiction", "entailment", "neutral")),
        ("sts-b", ("dev.tsv",), ("0.5", "4.2", "3.0")),
    ]:
        header, row = LAYOUTS[task][:2]
        fields = row.split("\t")
        first, second = TASKS[task].text_columns
        folder = tmp_path / task
        folder.mkdir()
        for offset, name in enumerate(("train.tsv", *names)):
            lines = []
            for i, sentence in enumerate(sentences):
                fields[first], fields[second] = sentence, sentences[(i + offset + 1) % len(sentences)]
                fields[-1] = labels[(i + offset) % len(labels)]
                lines.append("\t".join(fields))
            (folder / name).write_text("\n".join([header, *lines]) + "\n")
        data = glue_data(folder, task)
        if task == "mnli":
            model, loss = tiny_classifier(), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        else:
            preprocessor = BertPreprocessor(BertTokenizer(FIXTURE_VOCAB), seq_length=12)
            model, loss = BertClassifier(BertEncoder(CONFIG), num_classes=1, preprocessor=preprocessor), None
        metrics = data.evaluate(model, batch_size=2)
        for name in names:
            dev, outputs = data.devs[name], data.outputs[name]
            prefix = "" if len(names) == 1 else name[4:-4] + "_"
            if loss is None:
                expected = keras.losses.MeanSquaredError()(np.array(dev.labels)[:, None], outputs)
            else:
                expected = loss(np.array(dev.labels), outputs)
            assert metrics[prefix + "loss"] == pytest.approx(float(expected), rel=1e-5), (task, name)
        expected_names = {"matched_accuracy", "matched_loss", "mismatched_accuracy", "mismatched_loss"}
        assert set(metrics) == (expected_names if task == "mnli" else {"pearson", "spearman", "loss"})


def test_metrics_agree_with_scipy_on_random_data():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 6, 200).astype(float), rng.normal(size=200)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)


def test_submission_format(tmp_path):
    write_submission(tmp_path / "MNLI-m.tsv", "mnli", ["0", "1", "2"], [2, 0, 1])
    assert (tmp_path / "MNLI-m.tsv").read_text() == "index\tprediction\n0\tneutral\n1\tcontradiction\n2\tentailment\n"
    write_submission(tmp_path / "STS-B.tsv", "sts-b", ["0"], [3.14159])
    assert (tmp_path / "STS-B.tsv").read_text() == "index\tprediction\n0\t3.142\n"
    assert {task.name for task in TASKS.values()} >= {
        "CoLA",
        "SST-2",
        "MRPC",
        "STS-B",
        "QQP",
        "MNLI",
        "QNLI",
        "RTE",
        "WNLI",
    }


@pytest.mark.slow
def test_finetune_glue_end_to_end_on_a_few_sst2_rows(tmp_path, capsys):
    from bert_keras import BertConfig, BertEncoder
    from bert_keras.tasks.classifier import BertClassifier

    vocab = require(DATA / "vocab" / "vocab.txt")
    lines = require(GLUE / "SST-2" / "train.tsv").read_text().splitlines()
    data = tmp_path / "SST-2"
    data.mkdir()
    (data / "train.tsv").write_text("\n".join(lines[:25]) + "\n")
    (data / "dev.tsv").write_text("\n".join(lines[:1] + lines[25:37]) + "\n")
    (data / "test.tsv").write_text(
        "index\tsentence\n" + "".join(f"{i}\t{lines[40 + i].split(chr(9))[0]}\n" for i in range(5))
    )
    init = tmp_path / "encoder.keras"
    BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1)).save(init)
    out = tmp_path / "run"
    assert (
        cli(
            [
                "finetune",
                "glue",
                "--task",
                "sst-2",
                "--data-dir",
                str(data),
                "--output-dir",
                str(out),
                "--init",
                str(init),
                "--vocab",
                str(vocab),
                "--batch-size",
                "8",
                "--epochs",
                "2",
                "--max-train-steps",
                "4",
                "--verbose",
                "0",
                "--predict-test",
            ]
        )
        == 0
    )
    stdout = capsys.readouterr().out
    assert "SST-2: 24 training examples, 12 in dev.tsv" in stdout
    assert "training 4 steps (2 epoch(s) of 2)" in stdout
    history = json.loads((out / "eval_results.json").read_text())
    assert [h["epoch"] for h in history[:2]] == [1, 2]
    assert any((out / "logs").rglob("events.out.tfevents.*"))  # TensorBoard
    model = keras.saving.load_model(out / "best.keras")
    assert isinstance(model, BertClassifier) and model.num_classes == 2
    # The reported metric is the accuracy of the kept model's dev predictions.
    dev = read_split(data / "dev.tsv", "sst-2")
    predicted = model.predict(np.array(dev.texts[0], dtype=object), verbose=0).argmax(-1)
    best = json.loads((out / "best_metrics.json").read_text())
    assert best["accuracy"] == np.mean(predicted == np.array(dev.labels))
    assert best in history
    logits = model.predict(np.array(dev.texts[0], dtype=object), verbose=0)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(np.array(dev.labels), logits)
    assert best["loss"] == pytest.approx(float(loss), rel=1e-5)
    check_classifier_breakdown(out, TASKS["sst-2"].labels, dev, logits, best["epoch"], epochs=2, capsys=capsys)
    # The submission holds that model's test predictions, by index.
    test = read_split(data / "test.tsv", "sst-2", test=True)
    expected = model.predict(np.array(test.texts[0], dtype=object), verbose=0).argmax(-1)
    assert (out / "SST-2.tsv").read_text().splitlines() == ["index\tprediction"] + [
        f"{guid}\t{label}" for guid, label in zip(test.guids, expected)
    ]


def test_finetune_glue_reports_bad_input_clearly(tmp_path, capsys):
    assert (
        cli(["finetune", "glue", "--task", "nope", "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "o")])
        == 2
    )
    assert "unknown GLUE task 'nope'" in capsys.readouterr().err
