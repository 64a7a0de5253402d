"""`BertTextEmbedder`, its losses and retrieval metrics, against sentence-transformers:
vectors of all-MiniLM-L6-v2 and the losses and IR metrics on seeded random inputs, as
computed by sentence-transformers 6.2 on PyTorch (tests/fixtures/
make_sentence_transformers_reference.py, run outside this project's environment), and
pooling against the Hugging Face encoder outputs in ../shared/reference."""

import json
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, REFERENCE, require
from harness import VOCAB, run_task_test, tiny_encoder, tiny_preprocessor

from bert_keras import BertTextEmbedder, CoSENTLoss, MultipleNegativesRankingLoss
from bert_keras.datasets import retrieval
from bert_keras.training.contrastive import text_fingerprints

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from make_sentence_transformers_reference import reference_texts  # noqa: E402

ST_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def st_reference():
    return np.load(FIXTURES / "minilm_sentence_transformers.npz")


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return BertTextEmbedder.from_checkpoint(minilm_dir)


def random_case():
    """The seeded vectors behind the reference losses and metrics (same draws, same order)."""
    rng = np.random.default_rng(0)
    columns = rng.normal(size=(3, 16, 8)).astype(np.float32)
    scores = rng.uniform(0, 5, size=16).astype(np.float32)
    documents = rng.normal(size=(500, 16))
    chosen = [rng.choice(500, size=rng.integers(1, 4), replace=False) for _ in range(60)]
    queries = np.stack([documents[docs].mean(axis=0) for docs in chosen]) + rng.normal(size=(60, 16))
    return columns, scores, queries, documents, chosen


# --- all-MiniLM-L6-v2 as sentence-transformers ---------------------------------------------


def test_minilm_folder_settings_are_read(minilm):
    assert (minilm.pooling, minilm.normalize) == ("mean", True)
    assert minilm.preprocessor.packer.max_seq_length == 256  # sentence_bert_config.json
    assert minilm.preprocessor.packer.seq_length is None  # padded per batch, as sentence-transformers
    assert minilm.preprocessor.tokenizer.lower_case


@pytest.mark.slow
def test_minilm_vectors_equal_sentence_transformers(minilm, st_reference):
    texts, mrpc = reference_texts(require(DATA))
    vectors = minilm.encode(texts, batch_size=16)
    assert vectors.shape == st_reference["vectors"].shape == (len(texts), 384)
    np.testing.assert_allclose(vectors, st_reference["vectors"], atol=ST_TOLERANCE, rtol=0)
    # The batching does not change a vector: one at a time, and the input order kept.
    np.testing.assert_allclose(minilm.encode(texts[::-1][:5], batch_size=1), vectors[::-1][:5], atol=ST_TOLERANCE)
    a = minilm.encode([row[0] for row in mrpc], batch_size=64)
    b = minilm.encode([row[1] for row in mrpc], batch_size=64)
    correlations = retrieval.similarity_correlations(a, b, [row[2] for row in mrpc])
    assert round(correlations["spearman"], 4) == round(float(st_reference["mrpc_spearman"]), 4)
    assert round(correlations["pearson"], 4) == round(float(st_reference["mrpc_pearson"]), 4)


@pytest.mark.parametrize("pooling", ["mean", "cls", "max", "mean_sqrt_len"])
def test_pooling_matches_sentence_transformers_on_the_encoder_reference(minilm_dir, pooling):
    """Each pooling of the Hugging Face reference encoder outputs, by sentence-transformers'
    Pooling formulas (over real tokens; max with padding excluded)."""
    reference = np.load(require(REFERENCE / "minilm_l6_encoder.npz"))
    embedder = BertTextEmbedder.from_checkpoint(minilm_dir, pooling=pooling, normalize=False, preprocessor=False)
    inputs = {name: reference[name].astype("int32") for name in ("input_word_ids", "input_mask", "input_type_ids")}
    tokens, mask = reference["sequence_output"].astype(np.float64), reference["input_mask"][..., None].astype(bool)
    counts = mask.sum(axis=1)
    expected = {
        "mean": (tokens * mask).sum(1) / counts,
        "cls": tokens[:, 0],
        "max": np.where(mask, tokens, -np.inf).max(axis=1),
        "mean_sqrt_len": (tokens * mask).sum(1) / np.sqrt(counts),
    }[pooling]
    np.testing.assert_allclose(embedder.predict(inputs, verbose=0), expected, atol=2e-4, rtol=0)


@pytest.mark.slow
def test_save_checkpoint_writes_a_folder_that_reads_back(minilm, minilm_dir, tmp_path, st_reference):
    minilm.save_checkpoint(tmp_path / "st")
    modules = json.loads((tmp_path / "st" / "modules.json").read_text())
    assert [module["type"].rsplit(".", 1)[1] for module in modules] == ["Transformer", "Pooling", "Normalize"]
    assert json.loads((tmp_path / "st" / "sentence_bert_config.json").read_text())["max_seq_length"] == 256
    reloaded = BertTextEmbedder.from_checkpoint(tmp_path / "st")
    texts = ["A man is playing a guitar.", "Where does John live?"]
    np.testing.assert_allclose(reloaded.encode(texts), minilm.encode(texts), atol=1e-6, rtol=0)
    # "A man is playing a guitar." is the reference's fourth text from the end.
    np.testing.assert_allclose(reloaded.encode(texts)[0], st_reference["vectors"][-4], atol=ST_TOLERANCE)

    other = BertTextEmbedder(
        minilm.encoder,
        pooling="cls",
        normalize=False,
        query_prefix="query: ",
        document_prefix="passage: ",
        preprocessor=minilm.preprocessor,
    )
    other.save_checkpoint(tmp_path / "cls")
    again = BertTextEmbedder.from_checkpoint(tmp_path / "cls")
    assert (again.pooling, again.normalize, again.query_prefix, again.document_prefix) == (
        "cls",
        False,
        "query: ",
        "passage: ",
    )
    assert not (tmp_path / "cls" / "2_Normalize").exists()
    np.testing.assert_allclose(again.encode_queries(texts), other.encode(["query: " + t for t in texts]), atol=1e-6)


def test_unsupported_sentence_transformers_folders_are_errors(minilm_dir, tmp_path):
    folder = tmp_path / "dense"
    folder.mkdir()
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
            ]
        )
    )
    with pytest.raises(ValueError, match=r"modules.json: modules .*Dense"):
        BertTextEmbedder.from_checkpoint(folder)
    (folder / "modules.json").write_text("[{")
    with pytest.raises(ValueError, match="modules.json: not a sentence-transformers modules list"):
        BertTextEmbedder.from_checkpoint(folder)
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_mean_tokens": True, "pooling_mode_weightedmean_tokens": True})
    )
    with pytest.raises(ValueError, match=r"1_Pooling/config.json: pooling \['mean', 'pooling_mode_weightedmean"):
        BertTextEmbedder.from_checkpoint(folder)


# --- losses and metrics as sentence-transformers computes them ------------------------------


def test_losses_equal_sentence_transformers(st_reference):
    reference = json.loads(str(st_reference["losses_and_metrics"]))
    columns, scores, *_ = random_case()
    stacked = np.transpose(columns, (1, 0, 2))  # [batch, columns, H]
    unknown = np.zeros(stacked.shape[:2], np.float32)
    cases = {
        "mnrl_pairs": MultipleNegativesRankingLoss()(unknown[:, :2], stacked[:, :2]),
        "mnrl_triplets": MultipleNegativesRankingLoss()(unknown, stacked),
        "mnrl_symmetric": MultipleNegativesRankingLoss(symmetric=True)(unknown[:, :2], stacked[:, :2]),
        "cosent": CoSENTLoss()(scores, stacked[:, :2]),
    }
    for name, value in cases.items():
        np.testing.assert_allclose(float(value), reference[name], rtol=1e-5, err_msg=name)


def test_duplicate_texts_are_not_negatives():
    """A positive repeated in another row is left out of the softmax of the rows whose
    anchor or positive it repeats: the loss is that of the batch without those columns."""
    columns, *_ = random_case()
    anchors, positives = columns[0][:6], columns[1][:6]
    texts = [["a0", "a1", "a2", "a3", "a4", "a5"], ["p0", "p1", "p0", "a1", "p4", "p5"]]
    fingerprints = text_fingerprints([tf.constant(column) for column in texts]).numpy()
    loss = MultipleNegativesRankingLoss(scale=20.0, reduction=None)(
        fingerprints, np.stack([anchors, positives], axis=1)
    ).numpy()
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    scores = 20.0 * unit(anchors) @ unit(positives).T
    for row in range(6):
        keep = [j for j in range(6) if j == row or (texts[1][j] not in (texts[0][row], texts[1][row]))]
        expected = -scores[row, row] + np.log(np.exp(scores[row, keep]).sum())
        np.testing.assert_allclose(loss[row], expected, rtol=1e-5, err_msg=f"row {row}")
    assert loss[0] != pytest.approx(-scores[0, 0] + np.log(np.exp(scores[0]).sum()))  # p0 twice: masked


def test_retrieval_metrics_equal_sentence_transformers(st_reference):
    reference = json.loads(str(st_reference["losses_and_metrics"]))
    _, _, queries, documents, chosen = random_case()
    # Small blocks: the running top-k is merged across 8 document blocks and 4 query blocks.
    scores, indices = retrieval.top_k(queries, documents, k=10, query_block=16, document_block=64)
    cosine = retrieval._unit(queries) @ retrieval._unit(documents).T
    np.testing.assert_array_equal(indices, np.argsort(-cosine, axis=1, kind="stable")[:, :10])
    np.testing.assert_allclose(scores, np.take_along_axis(cosine, indices, 1), atol=1e-5)
    metrics = retrieval.retrieval_metrics(indices, chosen)
    for name in ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"):
        assert metrics[name] == pytest.approx(reference[name], abs=1e-9), name


# --- the task: fit, predict, save, export --------------------------------------------------


@pytest.mark.slow
def test_embedder_fits_pairs_predicts_saves_and_exports(tmp_path):
    embedder = BertTextEmbedder(tiny_encoder(), preprocessor=tiny_preprocessor())
    anchors = ["the quick fox", "who did go home", "the lazy dog", "a cat was good"]
    positives = ["a quick brown fox", "john did go home", "a lazy dog", "the cat is good"]

    def check_export(model, outputs):
        assert outputs["embeddings"].shape == (2, 16)
        expected = model.encode(["the quick fox jumps", "where was paris"])
        np.testing.assert_allclose(outputs["embeddings"], expected, atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(outputs["embeddings"], axis=1), 1.0, atol=1e-5)

    run_task_test(
        embedder,
        tmp_path,
        predict_x=["the quick fox jumps", "where was paris"],
        request={"text": ["the quick fox jumps", "where was paris"]},
        check_export=check_export,
        fit_data=((anchors, positives), None),
    )


@pytest.mark.slow
def test_fit_with_in_batch_negatives_learns_to_retrieve():
    """On pairs whose words overlap, a random tiny encoder learns to rank each anchor's
    positive first among the batch; the loss falls."""
    rng = np.random.default_rng(1)
    words = VOCAB[5:36]
    pairs = []
    for _ in range(32):
        chosen = rng.choice(words, size=4, replace=False)
        pairs.append((" ".join(chosen[:3]), " ".join(chosen[1:])))
    anchors, positives = [p[0] for p in pairs], [p[1] for p in pairs]
    embedder = BertTextEmbedder(tiny_encoder(), preprocessor=tiny_preprocessor())

    def recall_at_1():
        return retrieval.evaluate_retrieval(
            embedder.encode(anchors), embedder.encode(positives), [[i] for i in range(len(pairs))]
        )["recall@1"]

    before = recall_at_1()
    embedder.compile(optimizer=keras.optimizers.Adam(3e-3))
    # 30 steps as 3 epochs of 10 (each Keras epoch costs a new tf.data iterator).
    batches = tf.data.Dataset.from_tensor_slices(((anchors, positives),)).shuffle(32, seed=0).batch(16).repeat(5)
    history = embedder.fit(batches, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0]
    assert recall_at_1() > before + 0.3


@pytest.mark.slow
def test_cosent_fits_scored_pairs():
    embedder = BertTextEmbedder(tiny_encoder(), preprocessor=tiny_preprocessor())
    a = ["the quick fox", "the lazy dog", "a good film", "a bad film"] * 2
    b = ["a quick fox", "the cat", "a good film", "it was good"] * 2
    scores = np.array([4.5, 1.0, 5.0, 0.5] * 2, np.float32)
    embedder.compile(optimizer=keras.optimizers.Adam(3e-3), loss=CoSENTLoss())
    history = embedder.fit(tf.data.Dataset.from_tensor_slices(((a, b), scores)).batch(8).repeat(5), epochs=2, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    vectors_a, vectors_b = embedder.encode(a[:4]), embedder.encode(b[:4])
    correlations = retrieval.similarity_correlations(vectors_a, vectors_b, scores[:4])
    assert correlations["spearman"] > 0.7
