"""BertReranker against sentence-transformers' CrossEncoder: the fixture folder that
CrossEncoder saved (tests/fixtures/tasks/cross_encoder) and the scores it computed."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from harness import TASK_REFERENCES, hf_folder

from bert_keras import BertReranker
from bert_keras.tasks.reranker import RerankerLoss

PAIRS = [
    ("who jumps over the dog ?", "the quick brown fox jumps over the lazy dog"),
    ("what is the capital of france ?", "paris is the capital of france , a country in europe ."),
    ("what is the capital of france ?", "berlin is a city"),
    ("a dog runs", "the lazy dog"),
]  # as make_task_references.PAIRS


@pytest.fixture
def reranker(tmp_path):
    """A reranker of its own, for a test that trains it."""
    return BertReranker.from_checkpoint(hf_folder(tmp_path, "cross_encoder"))


@pytest.fixture(scope="module")
def stored_reranker(tmp_path_factory):
    """The fixture folder's reranker, loaded once: tests that only read it share its loaded
    weights and its traced `predict`. Read-only."""
    return BertReranker.from_checkpoint(hf_folder(tmp_path_factory.mktemp("reranker"), "cross_encoder"))


def columns(pairs):
    return [q for q, _ in pairs], [d for _, d in pairs]


@pytest.mark.slow
def test_scores_and_ranking_are_cross_encoders(stored_reranker):
    assert stored_reranker.activation == "sigmoid" and stored_reranker.preprocessor.packer.max_seq_length == 24
    scores = stored_reranker.predict(columns(PAIRS), verbose=0)
    np.testing.assert_allclose(scores, TASK_REFERENCES["cross_encoder/scores"], rtol=1e-5)
    np.testing.assert_allclose(
        stored_reranker.predict(PAIRS, verbose=0), scores
    )  # a list of pairs, as CrossEncoder takes
    hits = stored_reranker.rank(PAIRS[1][0], [d for _, d in PAIRS], top_k=3, return_documents=True)
    assert [hit["corpus_id"] for hit in hits] == TASK_REFERENCES["cross_encoder/rank_ids"].tolist()
    np.testing.assert_allclose([hit["score"] for hit in hits], TASK_REFERENCES["cross_encoder/rank_scores"], rtol=1e-5)
    assert hits[0]["text"] == PAIRS[hits[0]["corpus_id"]][1]


@pytest.mark.parametrize(
    "stored, activation",
    [
        ({"sentence_transformers": {"activation_fn": "torch.nn.modules.linear.Identity"}}, "identity"),
        ({"sbert_ce_default_activation_function": "torch.nn.modules.linear.Identity"}, "identity"),
        ({}, "sigmoid"),
    ],
)
def test_activation_of_older_folders(tmp_path, stored, activation):
    """sentence-transformers v4 kept the activation in config.json, older releases as
    `sbert_ce_default_activation_function`; with none, one label means sigmoid."""
    folder = hf_folder(tmp_path, "cross_encoder")
    (folder / "config_sentence_transformers.json").unlink()
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **stored}))
    model = BertReranker.from_checkpoint(folder)
    assert model.activation == activation
    expected = TASK_REFERENCES["cross_encoder/logits"]
    if activation == "sigmoid":
        expected = 1 / (1 + np.exp(-expected))
    np.testing.assert_allclose(model.predict(columns(PAIRS), verbose=0), expected, rtol=1e-5)


def test_unknown_activation_is_named(tmp_path):
    folder = hf_folder(tmp_path, "cross_encoder")
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"activation_fn": "my.module.Swish"}))
    with pytest.raises(ValueError, match="my.module.Swish"):
        BertReranker.from_checkpoint(folder)


@pytest.mark.slow
def test_save_checkpoint_writes_a_cross_encoder_folder_that_reads_back(tmp_path, stored_reranker):
    stored_reranker.save_checkpoint(tmp_path / "saved")
    config = json.loads((tmp_path / "saved/config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["sentence_transformers"]["activation_fn"] == "torch.nn.modules.activation.Sigmoid"
    assert json.loads((tmp_path / "saved/tokenizer_config.json").read_text())["model_max_length"] == 24
    again = BertReranker.from_checkpoint(tmp_path / "saved")
    np.testing.assert_array_equal(again.predict(PAIRS, verbose=0), stored_reranker.predict(PAIRS, verbose=0))


def test_losses_match_their_definitions():
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.3, 0.2]], np.float32)
    listwise = RerankerLoss()(np.zeros(2, np.int32), logits)
    expected = np.mean(-logits[:, 0] + np.log(np.exp(logits).sum(axis=1)))
    np.testing.assert_allclose(listwise, expected, rtol=1e-6)
    pair_logits, labels = np.array([[1.5], [-0.5]], np.float32), np.array([1.0, 0.0], np.float32)
    probabilities = 1 / (1 + np.exp(-pair_logits[:, 0]))
    expected = -np.mean(labels * np.log(probabilities) + (1 - labels) * np.log(1 - probabilities))
    np.testing.assert_allclose(RerankerLoss()(labels, pair_logits), expected, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("listwise", [False, True])
def test_fit_raises_the_positive_above_the_negatives(reranker, stored_reranker, listwise):
    queries = ["who jumps over the dog ?", "what is the capital of france ?", "a dog runs"]
    positives = ["the quick brown fox jumps", "paris is the capital of france", "the lazy dog runs"]
    negatives = ["berlin is a city", "a brown dog", "in europe"]
    tf.keras.utils.set_random_seed(0)
    # `reranker`'s weights before fitting are the fixture folder's: the shared model's traced predict reads them.
    before = stored_reranker.predict((queries * 2, positives + negatives), verbose=0)
    reranker.compile(optimizer=keras.optimizers.Adam(3e-4))
    repeat = 8  # one epoch of several steps: epochs cost more than steps
    if listwise:
        data, labels = (queries * repeat, positives * repeat, negatives * repeat), None
    else:
        labels = np.array(([1.0] * 3 + [0.0] * 3) * repeat, np.float32)
        data = ((queries * 2) * repeat, (positives + negatives) * repeat)
    loss_before = reranker.evaluate(data, labels, batch_size=6, verbose=0)
    reranker.fit(data, labels, epochs=2, batch_size=3 if listwise else 6, verbose=0)
    assert reranker.evaluate(data, labels, batch_size=6, verbose=0) < loss_before
    after = reranker.predict((queries * 2, positives + negatives), verbose=0)
    assert np.mean(after[:3] - after[3:]) > np.mean(before[:3] - before[3:])
    assert reranker.segments == ("query", "document")


@pytest.mark.slow
def test_fit_traces_the_step_once_whatever_the_padded_lengths(reranker, monkeypatch):
    """Lists `[B, C, L]` padded to each batch's longest pair must not trace a train step
    per length: a graph per shape would grow memory with every new length."""
    traced = []
    call = BertReranker.call
    monkeypatch.setattr(
        BertReranker, "call", lambda model, x, training=None: traced.append(x) or call(model, x, training)
    )
    short, medium, long = "a dog", "the quick brown fox jumps", "the quick brown fox jumps over the lazy dog"
    queries = ["dog", "fox", "who jumps ?", "who runs ?", long, long]  # padded to 8, 16 and 24 tokens in pairs
    positives = [short, short, medium, medium, long, long]
    negatives = [[short], [short], [medium], [medium], [long], [long]]
    reranker.compile(optimizer=keras.optimizers.Adam(1e-4))
    batches = reranker.preprocessed_dataset((queries, positives, np.array(negatives)), batch_size=2)
    lengths = {int(x["input_word_ids"].shape[-1]) for x, _ in batches}
    reranker.fit(batches, epochs=1, verbose=0)
    assert len(lengths) >= 3 and len(traced) <= 2
    assert all(x["input_word_ids"].shape[-1] is None for x in traced)


@pytest.mark.slow
def test_exported_reranker_serves_query_and_document(tmp_path, stored_reranker):
    from bert_keras.serving.export import export_for_serving

    export_for_serving(stored_reranker, stored_reranker.preprocessor, tmp_path / "export", version=1)
    served = tf.saved_model.load(str(tmp_path / "export" / "1"))
    query, document = columns(PAIRS)
    outputs = served.signatures["serving_default"](query=tf.constant(query), document=tf.constant(document))
    np.testing.assert_allclose(outputs["scores"], TASK_REFERENCES["cross_encoder/scores"], rtol=1e-5)


@pytest.mark.slow
def test_keras_file_round_trip(tmp_path, stored_reranker):
    stored_reranker.save(tmp_path / "reranker.keras")
    again = BertReranker.from_checkpoint(tmp_path / "reranker.keras")
    assert again.activation == "sigmoid"
    np.testing.assert_array_equal(again.predict(PAIRS, verbose=0), stored_reranker.predict(PAIRS, verbose=0))


def write_tsv(path, header, rows):
    path.write_text("\n".join("\t".join(row) for row in [header, *rows]) + "\n", encoding="utf-8")
    return path


@pytest.mark.slow
def test_finetune_reranker_mines_negatives_and_reports_ranking_metrics(tmp_path, capsys):
    from bert_keras_cli.cli import main as cli

    init = hf_folder(tmp_path, "cross_encoder")
    anchors = ["who jumps over the dog ?", "what is the capital of france ?", "a dog runs", "berlin is"]
    positives = ["the quick brown fox jumps", "paris is the capital of france", "the lazy dog runs", "a city"]
    train = write_tsv(tmp_path / "train.tsv", ["anchor", "positive"], list(zip(anchors, positives)))
    dev = write_tsv(tmp_path / "dev.tsv", ["anchor", "positive"], list(zip(anchors[:3], positives[:3])))
    run = tmp_path / "run"
    arguments = ["finetune", "reranker", "--train", str(train), "--dev", str(dev), "--init", str(init)]
    arguments += ["--output-dir", str(run), "--negatives", "2", "--dev-candidates", "2", "--batch-size", "2"]
    assert cli(arguments + ["--epochs", "1", "--verbose", "0"]) == 0
    assert "mined 2 hard negatives for each of 4 anchors" in capsys.readouterr().out
    results = json.loads((run / "eval_results.json").read_text())
    assert {"recall@1", "mrr@10", "ndcg@10"} <= set(results[0])
    best = BertReranker.from_checkpoint(run / "best.keras")
    folder = BertReranker.from_checkpoint(run / "cross-encoder")
    np.testing.assert_allclose(folder.predict(PAIRS, verbose=0), best.predict(PAIRS, verbose=0), rtol=1e-6)

    binary = tmp_path / "binary.tsv"
    binary.write_bytes(b"anchor\tpositive\n\x00\x01\x02")
    assert cli(arguments[:3] + [str(binary)] + arguments[4:] + ["--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(binary) in err and "NUL byte" in err


def test_convert_reads_a_cross_encoder_folder_as_a_reranker(tmp_path):
    from bert_keras.tasks.checkpoint_models import load_model

    folder = hf_folder(tmp_path, "cross_encoder")
    model = load_model(folder)
    assert isinstance(model, BertReranker) and model.activation == "sigmoid"
    np.testing.assert_allclose(model.predict(PAIRS, verbose=0), TASK_REFERENCES["cross_encoder/scores"], rtol=1e-5)


def test_dev_lists_do_not_favour_a_reranker_that_scores_every_pair_alike():
    """In the file the relevant document comes first; ties keep their order, so unshuffled
    lists would give a constant reranker recall@1 of 1."""
    from bert_keras.datasets.reranking import dev_candidates, ranking_metrics

    rows = [
        (f"query {q}", f"{'relevant' if d == 0 else 'other'} {q} {d}", float(d == 0))
        for q in range(20)
        for d in range(4)
    ]
    columns = {"query": [r[0] for r in rows], "document": [r[1] for r in rows]}
    queries, candidates, relevant = dev_candidates("labelled", columns, [r[2] for r in rows], None, 0)

    class ScoresAlike:
        def predict(self, pairs, **kwargs):
            return np.zeros(len(pairs), np.float32)

    assert ranking_metrics(ScoresAlike(), queries, candidates, relevant)["recall@1"] < 0.5  # chance: 0.25
    assert all(texts[i].startswith("relevant") for texts, found in zip(candidates, relevant) for i in found)
    assert sorted(map(sorted, candidates)) == sorted(sorted(r[1] for r in rows if r[0] == q) for q in queries)
