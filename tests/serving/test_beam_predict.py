"""`bert_keras.serving.batch.beam`: `BertModelHandler` in Beam's RunInference (also
keyed) and `bert-keras predict --runner` give the records of the local `predict_files`
(labels identical, scores within 1e-5), on the DirectRunner in one process and in two,
and on the PortableRunner with Beam's Python job service."""

import json
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference
from doc_blocks import block_run_by
from harness import tiny_embedder_folder

from bert_keras.serving.batch import PredictOptions, predict_files
from bert_keras.serving.batch.beam import BertModelHandler
from bert_keras.serving.batch.readers import Row
from bert_keras_cli.cli import main as cli

TEXTS = ["the quick brown fox", "", "a dog in paris , france", "berlin is a city in europe", "the fox", "a cat"]


@pytest.fixture(scope="module")
def models(tmp_path_factory, classifier_keras):
    return {
        "classifier": classifier_keras,
        "embedder": tiny_embedder_folder(tmp_path_factory.mktemp("beam_models") / "st"),
    }


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("beam_inputs") / "in.txt"
    path.write_text("".join(text + "\n" for text in TEXTS), encoding="utf-8")
    return path


def read_jsonl(*paths):
    return [json.loads(line) for path in paths for line in Path(path).read_text(encoding="utf-8").splitlines()]


def local_records(model, texts_file, out, **options):
    predict_files(str(model), [str(texts_file)], out, PredictOptions(**options))
    return {record["id"]: record for record in read_jsonl(out)}


def assert_records_close(actual, expected):
    """Same rows by id, same fields; numbers within 1e-5, everything else identical."""
    assert sorted(actual) == sorted(expected)
    for key, record in expected.items():
        assert sorted(actual[key]) == sorted(record), key
        for field, value in record.items():
            if isinstance(value, (float, list)) or (isinstance(value, dict) and field == "scores"):
                got = list(actual[key][field].values()) if isinstance(value, dict) else actual[key][field]
                want = list(value.values()) if isinstance(value, dict) else value
                np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=f"{key} {field}")
            else:
                assert actual[key][field] == value, (key, field)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["classifier", "embedder", "export"])
def test_keyed_handler_in_a_pipeline_gives_predict_s_records(tmp_path, request, models, texts_file, kind):
    model = request.getfixturevalue("classifier_export") if kind == "export" else models[kind]
    expected = local_records(model, texts_file, tmp_path / "local.jsonl", all_scores=True, batch_size=2)
    handler = BertModelHandler(str(model), PredictOptions(batch_size=2, all_scores=True))
    prefix = str(tmp_path / "beam")
    with beam.Pipeline() as pipeline:
        _ = (
            pipeline
            | beam.Create([(f"{texts_file}:{number}", text) for number, text in enumerate(TEXTS, start=1)])
            | RunInference(KeyedModelHandler(handler))
            | beam.MapTuple(lambda key, record: json.dumps({"id": key, **record}))
            | beam.io.WriteToText(prefix, file_name_suffix=".jsonl")
        )
    records = read_jsonl(*sorted(tmp_path.glob("beam-*-of-*.jsonl")))
    assert len(records) == len(TEXTS)
    assert_records_close({record["id"]: record for record in records}, expected)


@pytest.mark.slow
def test_handler_takes_texts_dicts_and_rows(tmp_path, models, texts_file):
    expected = local_records(models["classifier"], texts_file, tmp_path / "local.jsonl")
    handler = BertModelHandler(models["classifier"], PredictOptions(batch_size=4))
    assert handler.batch_elements_kwargs() == {"min_batch_size": 4, "max_batch_size": 32}
    predictor = handler.load_model()
    (segment,) = predictor.segments
    ids = [f"{texts_file}:{number}" for number in range(1, 4)]
    batch = [TEXTS[0], {segment: TEXTS[1]}, Row(ids[2], {segment: TEXTS[2]})]
    records = handler.run_inference(batch, predictor)
    assert "id" not in records[0] and "id" not in records[1] and records[2]["id"] == ids[2]
    assert_records_close({i: {"id": i, **r} for i, r in zip(ids, records)}, {i: expected[i] for i in ids})
    assert handler.get_num_bytes(batch) == sum(len(text.encode()) for text in TEXTS[:3])
    with pytest.raises(ValueError, match=f"lacks \\['{segment}'\\]"):
        handler.run_inference([{"body": "x"}], predictor)


@pytest.mark.slow
def test_runner_command_writes_the_local_records(tmp_path, models, capsys):
    """Two files, named columns and ids, a bad row skipped: the local run's records."""
    rows = [f"t{i}\t{text}" for i, text in enumerate(TEXTS)]
    (tmp_path / "a.tsv").write_bytes("id\tbody\n".join(["", "\n".join(rows[:4]) + "\n"]).encode())
    (tmp_path / "b.tsv").write_bytes(b"id\tbody\nbad\t\xff\xfe\n" + "\n".join(rows[4:]).encode() + b"\n")
    flags = ["--id-column", "id", "--column", "text=body", "--on-error", "skip", "--batch-size", "2"]
    argv = ["predict", str(models["classifier"]), "--input", str(tmp_path / "*.tsv"), *flags]
    assert cli([*argv, "--output", str(tmp_path / "local.jsonl")]) == 0
    assert cli([*argv, "--output", str(tmp_path / "out.jsonl"), "--runner", "DirectRunner"]) == 0
    assert "shards" in capsys.readouterr().out
    expected = {record["id"]: record for record in read_jsonl(tmp_path / "local.jsonl")}
    records = read_jsonl(*sorted(tmp_path.glob("out-*-of-*.jsonl")))
    assert len(records) == len(TEXTS) + 1 and "not UTF-8" in expected[f"{tmp_path}/b.tsv:2"]["error"]
    assert_records_close({record["id"]: record for record in records}, expected)
    assert cli([*argv, "--output", str(tmp_path / "out.jsonl"), "--runner", "DirectRunner"]) == 2
    assert "out-*-of-*.jsonl exist (a finished run)" in capsys.readouterr().err


def test_runner_needs_jsonl_and_takes_no_local_flags(tmp_path, models, texts_file, capsys):
    argv = ["predict", str(models["classifier"]), "--input", str(texts_file)]
    assert cli([*argv, "--output", str(tmp_path / "out.tsv"), "--runner", "DirectRunner"]) == 2
    assert "a Beam run writes JSON-lines shards; name it OUT.jsonl" in capsys.readouterr().err
    assert cli([*argv, "--output", str(tmp_path / "out.jsonl"), "--runner", "local", "--x=1"]) == 2
    assert "need --runner (a Beam runner)" in capsys.readouterr().err
    chunked = [*argv, "--chunk-size", "5", "--output", str(tmp_path / "out.jsonl"), "--runner", "DirectRunner"]
    assert cli(chunked) == 2
    assert "--chunk-size is the local runner's" in capsys.readouterr().err
    assert not list(tmp_path.glob("out*"))


def job_service():
    """Beam's Python job service (`local_job_service_main`) on a free port: (process, port)."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        port = probe.getsockname()[1]
    module = "apache_beam.runners.portability.local_job_service_main"
    service = subprocess.Popen([sys.executable, "-m", module, "--port", str(port)], stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and service.poll() is None:
        with socket.socket() as client:
            if client.connect_ex(("localhost", port)) == 0:
                return service, port
        time.sleep(0.2)
    service.kill()
    raise RuntimeError("the job service did not start")


@pytest.mark.slow
def test_portable_runner_on_a_local_job_service(tmp_path, models, texts_file, capsys):
    """The PortableRunner (a job submitted to a job service, run by a worker in this
    process: LOOPBACK) writes the local run's records."""
    expected = local_records(models["embedder"], texts_file, tmp_path / "local.jsonl")
    service, port = job_service()
    try:
        argv = ["predict", str(models["embedder"]), "--input", str(texts_file), "--output", str(tmp_path / "out.jsonl")]
        portable = ["--runner", "PortableRunner", f"--job_endpoint=localhost:{port}", "--environment_type=LOOPBACK"]
        assert cli([*argv, *portable]) == 0
    finally:
        service.kill()
        service.wait()
    records = read_jsonl(*sorted(tmp_path.glob("out-*-of-*.jsonl")))
    assert len(records) == len(TEXTS)
    assert_records_close({record["id"]: record for record in records}, expected)


def doc_block(test):
    return block_run_by(f"tests/serving/test_beam_predict.py::{test}").text


@pytest.fixture
def workspace(tmp_path, monkeypatch, models):
    """docs/predict.md's Beam workspace: best.keras and texts.txt."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(models["classifier"], "best.keras")
    Path("texts.txt").write_text("".join(text + "\n" for text in TEXTS), encoding="utf-8")
    return tmp_path


@pytest.mark.slow
def test_docs_beam_command(workspace):
    """The page's command: the DirectRunner in two worker processes."""
    command = shlex.split(doc_block("test_docs_beam_command"))
    assert command[:2] == ["bert-keras", "predict"] and cli(command[1:]) == 0
    expected = local_records("best.keras", "texts.txt", workspace / "local.jsonl")
    records = read_jsonl(*sorted(workspace.glob("labels-*-of-*.jsonl")))
    assert len(records) == len(TEXTS)
    assert_records_close({record["id"]: record for record in records}, expected)


@pytest.mark.slow
def test_docs_beam_pipeline(workspace):
    exec(doc_block("test_docs_beam_pipeline"), {})
    texts = ["the printer is on fire", "thanks , it works now"]
    Path("pair.txt").write_text("".join(text + "\n" for text in texts), encoding="utf-8")
    expected = local_records("best.keras", "pair.txt", workspace / "local.jsonl", all_scores=True)
    records = {record["id"]: record for record in read_jsonl(*sorted(workspace.glob("labels-*-of-*.jsonl")))}
    assert_records_close(
        {f"pair.txt:{key[1]}": {**r, "id": f"pair.txt:{key[1]}"} for key, r in records.items()}, expected
    )
