"""`predict --top-k-per-query`: a reranker's best rows of each query equal a ranking
computed apart (the model's own `predict` scores of the same pairs, sorted in numpy),
with a query's rows spread over chunks and files, after a run stopped midway and on
Beam; and an embedder's vectors in `.npy` shards equal its vectors."""

import json

import numpy as np
import pytest
from harness import hf_folder, tiny_embedder_folder

from bert_keras.serving.batch import PredictOptions, load_model, predict_files
from bert_keras.serving.batch.predictor import BatchPredictor
from bert_keras_cli.cli import main as cli

pytestmark = pytest.mark.slow  # most tests here take over 3 CPU-seconds (docs/development.md)

QUERIES = ["what is the capital", "a dog", "berlin city"]
PASSAGES = [
    "paris is the capital of france",
    "the fox jumps",
    "berlin is a city in europe",
    "a dog in paris",
    "the quick brown fox",
    "london",
]
K = 2


def read_jsonl(*paths):
    return [json.loads(line) for path in paths for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    return hf_folder(tmp_path_factory.mktemp("reranker"), "cross_encoder")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Every query with every passage, queries interleaved, over two files: (files, ids, pairs)."""
    folder = tmp_path_factory.mktemp("pairs")
    rows = [(query, passage) for passage in PASSAGES for query in QUERIES]
    files, ids = [folder / "a.tsv", folder / "b.tsv"], []
    half = len(rows) // 2 + 1
    for path, part in zip(files, (rows[:half], rows[half:])):
        path.write_text("query\tdocument\n" + "".join(f"{q}\t{p}\n" for q, p in part), encoding="utf-8")
        ids += [f"{path}:{line}" for line in range(2, len(part) + 2)]
    return files, ids, rows


def reference(model_path, ids, rows):
    """Each query's K best (id, score), from the model's own scores sorted in numpy."""
    scores = np.asarray(load_model(model_path).predict(rows, verbose=0)).reshape(-1)
    queries = np.array([query for query, _ in rows])
    ranking = []
    for query in QUERIES:
        (rows_of_query,) = np.nonzero(queries == query)
        best = rows_of_query[np.argsort(-scores[rows_of_query], kind="stable")[:K]]
        ranking += [(query, rank, ids[row], scores[row]) for rank, row in enumerate(best, start=1)]
    return ranking


@pytest.fixture(scope="module")
def expected_ranking(reranker, pairs):
    """`reference` of the reranker on the pairs, computed once."""
    _, ids, rows = pairs
    return reference(reranker, ids, rows)


def assert_ranking(records, expected):
    assert [(r["query"], r["rank"], r["id"]) for r in records] == [e[:3] for e in expected]
    np.testing.assert_allclose([r["score"] for r in records], [e[3] for e in expected], atol=1e-5, rtol=0)


def test_top_k_per_query_equals_the_model_s_scores_sorted(tmp_path, reranker, pairs, expected_ranking, capsys):
    files, _, rows = pairs
    out = tmp_path / "top.jsonl"
    summary = predict_files(str(reranker), files, out, PredictOptions(batch_size=3), top_k_per_query=K, chunk_size=4)
    assert (summary["rows"], summary["records"]) == (len(rows), K * len(QUERIES))
    assert_ranking(read_jsonl(out), expected_ranking)
    assert (
        cli(
            ["predict", str(reranker), "--input", *map(str, files), "--output", str(tmp_path / "top.tsv")]
            + [*("--top-k-per-query", str(K), "--chunk-size", "5")]
        )
        == 0
    )
    lines = (tmp_path / "top.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "query\trank\tid\tscore" and len(lines) == 1 + K * len(QUERIES)
    said = capsys.readouterr().out.splitlines()[-1]
    best = f"each query's best {K} of {len(rows)} rows predicted"
    assert said == f"wrote {K * len(QUERIES)} records to {tmp_path / 'top.tsv'} ({best})"


def test_top_k_per_query_resumes_a_stopped_run(tmp_path, reranker, pairs, expected_ranking):
    """A run stopped after 3 chunks, run again: the ranking of an uninterrupted run."""
    files = pairs[0]
    predictor = BatchPredictor(load_model(reranker), batch_size=4)
    answer, calls = predictor.predict_rows, []

    def stop_at_the_fourth_chunk(chunk, on_error="raise"):
        calls.append(len(chunk))
        if len(calls) == 4:
            raise KeyboardInterrupt
        return answer(chunk, on_error)

    predictor.predict_rows = stop_at_the_fourth_chunk
    out = tmp_path / "top.jsonl"
    with pytest.raises(KeyboardInterrupt):
        predict_files(predictor, files, out, top_k_per_query=K, chunk_size=2)
    assert not out.exists() and len(list((tmp_path / "top.jsonl.parts").glob("part-*"))) == 3
    predictor.predict_rows = answer
    predict_files(predictor, files, out, top_k_per_query=K, chunk_size=2)
    assert_ranking(read_jsonl(out), expected_ranking)


def test_top_k_per_query_on_beam_and_its_errors(tmp_path, reranker, pairs, expected_ranking, capsys):
    files = pairs[0]
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(b"query\tdocument\na dog\t\xff\n")
    argv = ["predict", str(reranker), "--input", *map(str, files), str(bad), "--top-k-per-query", str(K)]
    argv += ["--on-error", "skip"]
    assert cli([*argv, "--output", str(tmp_path / "local.jsonl")]) == 0
    assert cli([*argv, "--output", str(tmp_path / "beam.jsonl"), "--runner", "DirectRunner"]) == 0
    local = read_jsonl(tmp_path / "local.jsonl")
    assert local[-1] == {"id": f"{bad}:2", "error": f"{bad}:2: not UTF-8 text: byte 0xff at column 7"}
    assert_ranking(local[:-1], expected_ranking)
    beam = read_jsonl(*sorted(tmp_path.glob("beam-*-of-*.jsonl")))
    by_rank = sorted(beam, key=lambda r: (QUERIES.index(r["query"]), r["rank"]) if "rank" in r else (9, 0))
    assert_ranking(by_rank[:-1], expected_ranking)
    assert by_rank[-1] == local[-1]
    capsys.readouterr()
    classifier = hf_folder(tmp_path, "sequence_single")
    assert (
        cli(
            ["predict", str(classifier), "--input", str(bad), "--output", str(tmp_path / "c.jsonl")]
            + [*("--top-k-per-query", "2")]
        )
        == 2
    )
    assert "--top-k-per-query ranks a reranker's passages; this model is a classifier" in capsys.readouterr().err
    for runner in ([], ["--runner", "DirectRunner"]):  # refused before any row is predicted
        zero = ["predict", str(reranker), "--input", str(bad), "--output", str(tmp_path / "z.jsonl")]
        assert cli([*zero, "--top-k-per-query", "0", *runner]) == 2
        assert "top-k-per-query must be at least 1, got 0" in capsys.readouterr().err
    for vectors in ("v.npy", "v/"):
        assert cli(["predict", str(classifier), "--input", str(bad), "--output", f"{tmp_path}/{vectors}"]) == 2
        assert ".npy holds an embedder's vectors; write .jsonl, .tsv or .parquet for a classifier" in (
            capsys.readouterr().err
        )
    assert not list(tmp_path.glob("*.parts")) and not list(tmp_path.glob("c.*")) and not list(tmp_path.glob("z*"))


def test_vectors_in_npy_shards_with_their_ids(tmp_path):
    folder = tiny_embedder_folder(tmp_path / "st")
    texts = [f"text number {i} " * (1 + i % 4) for i in range(7)]
    source = tmp_path / "in.txt"
    source.write_text("".join(text + "\n" for text in texts), encoding="utf-8")
    expected = load_model(folder).encode(texts)
    (tmp_path / "vectors.tmp").mkdir()  # what a run killed while writing its shards leaves
    argv = ["predict", str(folder), "--input", str(source), "--output", f"{tmp_path}/vectors/", "--shard-rows", "3"]
    assert cli([*argv, "--chunk-size", "2"]) == 0
    names = sorted(path.name for path in (tmp_path / "vectors").iterdir())
    assert names == [
        f"{kind}-0000{i}-of-00003.{ext}" for kind, ext in (("ids", "jsonl"), ("vectors", "npy")) for i in range(3)
    ]
    shards = [np.load(tmp_path / "vectors" / f"vectors-0000{i}-of-00003.npy", mmap_mode="r") for i in range(3)]
    assert [len(shard) for shard in shards] == [3, 3, 1] and shards[0].dtype == np.float32
    np.testing.assert_allclose(np.concatenate(shards), expected, atol=1e-5, rtol=0)
    ids = read_jsonl(*sorted((tmp_path / "vectors").glob("ids-*.jsonl")))
    assert [r["id"] for r in ids] == [f"{source}:{i}" for i in range(1, 8)]
    assert not (tmp_path / "vectors.tmp").exists() and not (tmp_path / "vectors.parts").exists()


def test_tied_scores_rank_alike_on_beam_and_locally(tmp_path):
    """Every query's rows of one score: its first K rows in input order, on the DirectRunner as
    locally, though Beam meets them last first."""
    import apache_beam as beam

    from bert_keras.serving.batch.beam import RankTopPerQuery
    from bert_keras.serving.batch.ranking import top_per_query

    rows = [(f"in.tsv:{row + 2}", QUERIES[row % 2], 0.5 if row % 3 else 0.25) for row in range(12)]
    records = [{"id": id, "score": score, "query": query} for id, query, score in rows]
    local = list(top_per_query(lambda: iter(records), K))
    expected = [
        (query, rank, id)
        for query in QUERIES[:2]
        for rank, id in enumerate([id for id, q, score in rows if q == query and score == 0.5][:K], start=1)
    ]
    assert [(r["query"], r["rank"], r["id"]) for r in local] == expected
    keyed = [((0, row), query, {"id": id, "score": score}) for row, (id, query, score) in enumerate(rows)]
    with beam.Pipeline("DirectRunner") as pipeline:
        _ = (
            pipeline
            | beam.Create(keyed[::-1], reshuffle=False)
            | beam.Map(lambda item: ((item[0], item[1]), item[2]))
            | RankTopPerQuery(K)
            | beam.Map(json.dumps)
            | beam.io.WriteToText(str(tmp_path / "top"), file_name_suffix=".jsonl")
        )
    on_beam = sorted(read_jsonl(*tmp_path.glob("top-*.jsonl")), key=lambda r: (QUERIES.index(r["query"]), r["rank"]))
    assert on_beam == local
