"""`run_identity`: a job's settings and the content of what it reads, compared on resume.
Each way a file, folder, checkpoint prefix, glob or model in memory can change between a
kill and a rerun is seen and named; what did not change is not reported."""

import json
import os

import numpy as np
import pytest

from bert_keras import run_identity
from bert_keras.run_identity import RunChanged, check, differences, fingerprint, input_paths, job_identity


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_file_edited_in_place_with_the_same_size_and_time_is_another_input(tmp_path):
    path = write(tmp_path / "train.tsv", b"text\tlabel\ngood\t1\n")
    before = job_identity({"epochs": 2}, {"train": path})
    status = os.stat(path)
    write(path, b"text\tlabel\nbad!\t1\n")
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    after = job_identity({"epochs": 2}, {"train": path})
    (found,) = differences(before, after)
    assert found.startswith(f"train {path} changed (18 bytes, sha256 ") and "then, 18 bytes" in found
    assert differences(before, job_identity({"epochs": 2}, {"train": path})) != []
    assert differences(after, job_identity({"epochs": 2}, {"train": path})) == []


def test_a_large_file_is_its_size_time_and_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(run_identity, "WHOLE_DIGEST_BYTES", 1000)
    monkeypatch.setattr(run_identity, "END_BLOCK_BYTES", 100)
    data = bytearray(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    path = write(tmp_path / "corpus.txt", bytes(data))
    status = os.stat(path)
    recorded = fingerprint(path)
    assert set(recorded) == {"path", "bytes", "mtime_ns", "ends_sha256"}
    for offset in (0, 4999):  # the first and the last block, the time kept
        changed = bytearray(data)
        changed[offset] ^= 1
        write(path, bytes(changed))
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
        assert fingerprint(path) != recorded
    write(path, bytes(data))
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert fingerprint(path) == recorded
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1))  # touched: taken as changed
    assert fingerprint(path) != recorded


def test_a_folder_names_the_files_added_removed_and_changed(tmp_path):
    folder = tmp_path / "export"
    write(folder / "saved_model.pb", b"graph")
    write(folder / "variables" / "variables.index", b"index")
    before = job_identity({}, {"model": folder})
    write(folder / "variables" / "variables.index", b"index 2")
    write(folder / "assets" / "vocab.txt", b"[PAD]")
    (found,) = differences(before, job_identity({}, {"model": folder}))
    assert found == f"model {folder} changed: assets/vocab.txt added, variables/variables.index changed"


def test_a_checkpoint_prefix_and_a_glob_are_the_files_they_name(tmp_path):
    prefix = tmp_path / "bert_model.ckpt"
    write(tmp_path / "bert_model.ckpt.index", b"i")
    data = write(tmp_path / "bert_model.ckpt.data-00000-of-00001", b"weights")
    shards = [write(tmp_path / f"shard-{i}.tfrecord", b"record %d" % i) for i in range(3)]
    inputs = {"init": str(prefix), "data": str(tmp_path / "shard-*.tfrecord")}
    before = job_identity({}, inputs)
    assert sorted(before["inputs"]["init"]["files"]) == [data.name, "bert_model.ckpt.index"]
    assert sorted(before["inputs"]["data"]["files"]) == [shard.name for shard in shards]
    write(data, b"weights 2")
    shards[2].unlink()
    found = differences(before, job_identity({}, inputs))
    assert found == [
        f"data {tmp_path / 'shard-*.tfrecord'} changed: shard-2.tfrecord removed",
        f"init {prefix} changed: bert_model.ckpt.data-00000-of-00001 changed",
    ]


def test_a_model_in_memory_is_its_weights():
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    before = job_identity({}, {"model": model})
    assert differences(before, job_identity({}, {"model": model})) == []
    model.layers[0].kernel.assign(-model.layers[0].kernel)
    (found,) = differences(before, job_identity({}, {"model": model}))
    assert found == "model <Sequential in memory> has other weights"


def test_settings_are_named_and_the_message_is_one_line(tmp_path):
    path = write(tmp_path / "dev.tsv", b"a\n")
    before = job_identity({"learning_rate": 2e-5, "seed": 0, "columns": None}, {"dev": path})
    write(path, b"a\nb\n")
    after = job_identity({"learning_rate": 1e-3, "seed": 0, "columns": {"text": "q"}}, {"dev": path})
    with pytest.raises(RunChanged) as error:
        check(before, after, "OUT.parts", "pass --overwrite to start over", label=lambda n: f"--{n.replace('_', '-')}")
    message = str(error.value)
    assert "\n" not in message and message.startswith("OUT.parts holds the unfinished run of other inputs or settings")
    assert '--columns unset there, {"text": "q"} now; --learning-rate 2e-05 there, 0.001 now; ' in message
    assert f"dev {path} changed (2 bytes, sha256 " in message and message.endswith(": pass --overwrite to start over")
    check(after, after, "OUT.parts", "")  # the same job: nothing raised


def test_input_paths_are_the_values_naming_files(tmp_path):
    train = write(tmp_path / "train.tsv", b"x")
    values = {
        "train": str(train),
        "data_dir": str(tmp_path),
        "output_dir": str(tmp_path),
        "task": "train.tsv",  # not a path from here
        "learning_rate": 1e-3,
        "input": [str(train), str(train)],
        "mixed": [str(train), "nothing-here"],
        "missing": str(tmp_path / "absent.tsv"),
    }
    found = input_paths(values, exclude=("output_dir",))
    assert found == {"train": str(train), "data_dir": str(tmp_path), "input": [str(train), str(train)]}


def test_a_record_is_written_whole_and_a_cut_one_is_an_error_naming_it(tmp_path):
    path = tmp_path / "run.json"
    identity = job_identity({"chunk_size": 2}, {"inputs": [write(tmp_path / "in.txt", b"q\n")]})
    run_identity.write_record(path, identity)
    assert run_identity.read_record(path, "") == json.loads(json.dumps(identity))
    assert not list(tmp_path.glob("*.tmp"))
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(RunChanged, match=f"^{path}: not a run record .*: start over$"):
        run_identity.read_record(path, "start over")
    assert run_identity.read_record(tmp_path / "none.json", "") is None


def test_what_the_job_writes_inside_an_input_folder_is_not_its_input(tmp_path):
    """`--data-dir DATA --output-dir DATA/run`: the run's own backups do not make its data another input."""
    write(tmp_path / "train.tsv", b"text\tlabel\n")
    before = job_identity({}, {"data_dir": tmp_path}, outputs=[tmp_path / "run"])
    write(tmp_path / "run" / "checkpoints" / "state.json", b"{}")
    assert differences(before, job_identity({}, {"data_dir": tmp_path}, outputs=[tmp_path / "run"])) == []
    write(tmp_path / "dev.tsv", b"text\tlabel\n")
    (found,) = differences(before, job_identity({}, {"data_dir": tmp_path}, outputs=[tmp_path / "run"]))
    assert found == f"data_dir {tmp_path} changed: dev.tsv added"
