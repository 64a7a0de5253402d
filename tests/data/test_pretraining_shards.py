"""Pre-training data shard by shard: the cut points, determinism, workers, resuming, Beam, bad input."""

import io
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import DATA, VOCAB_FILE, require
from hypothesis import given, settings
from hypothesis import strategies as st

from bert_keras import BertTokenizer
from bert_keras.data import pretraining_shards as shards
from bert_keras.data.documents import parse_documents, read_documents, tokenize_documents
from bert_keras.data.example_encoder import serialize_instance
from bert_keras.data.input_shards import document_start, plan_shards, read_shard
from bert_keras.data.instances import Instance, instance_features
from bert_keras.data.tfrecords import expand_files

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = DATA / "pretraining" / "sample_text.txt"
GUTENBERG = DATA / "pretraining" / "gutenberg"
SMALL = shards.Recipe(dupe_factor=2, random_seed=7)


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(str(require(VOCAB_FILE)))


def records(path):
    return [r for r in tf.data.TFRecordDataset(str(path)).as_numpy_iterator()]


def expected_records(documents, tokenizer, recipe, index):
    """What the original recipe (InstanceMaker, held to a transcription of the original) makes of a shard."""
    tokenized = tokenize_documents(documents, tokenizer)
    instances = recipe.maker(tokenizer.vocabulary).instances(
        tokenized, recipe.dupe_factor, random.Random(recipe.random_seed + index)
    )
    return [serialize_instance(i, recipe.max_seq_length, recipe.max_predictions_per_seq) for i in instances]


def output_bytes(folder):
    return {path.name: path.read_bytes() for path in sorted(Path(folder).iterdir())}


# ---------------------------------------------------------------- cut points

LINES = [
    b"",
    b"  ",
    b"\t \r",
    b"CHAPTER I",
    b"  CHAPTER II  ",
    b"IV. The End",
    b"IV. The End.",
    b"Chapter 3",
    b"[A Title]",
    b"It was late.",
    b"Mr. Smith came. He left!",
    b"wrapped text and",
    b"more words",
    b"caf\xc3\xa9 \xe2\x80\x9cquoted\xe2\x80\x9d",
    b"bad \xff\xfe bytes",
    b"x\x0cy",
    b"\x0c",
]


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.sampled_from(LINES), max_size=40),
    newline=st.sampled_from([b"\n", b"\r\n"]),
    format=st.sampled_from(["lines", "prose"]),
    offsets=st.lists(st.floats(0, 1), max_size=6),
)
def test_cutting_at_document_starts_splits_no_document(lines, newline, format, offsets):
    raw = newline.join(lines)
    file = io.BytesIO(raw)
    cuts = sorted({0, len(raw), *(document_start(file, int(f * len(raw)), format, len(raw)) for f in offsets)})
    pieces = [
        document
        for low, high in zip(cuts[:-1], cuts[1:])
        for document in parse_documents(raw[low:high].decode("utf-8", errors="ignore"), format)
    ]
    assert pieces == parse_documents(raw.decode("utf-8", errors="ignore"), format)


@pytest.mark.parametrize(
    "shard_bytes, num_shards", [(1, None), (4, None), (7, None), (100, None), (0, 1), (0, 3), (0, 40)]
)
def test_shards_cut_the_input_stream_into_consecutive_slices(tmp_path, shard_bytes, num_shards):
    sizes = [5, 1, 12, 3]
    files = []
    for i, size in enumerate(sizes):
        files.append(tmp_path / f"f{i}.txt")
        files[-1].write_bytes(b"x" * size)
    _, _, plan = plan_shards(files, tmp_path / "d", shard_bytes, num_shards, format="lines")
    total = sum(sizes)
    assert len(plan) == (num_shards or -(-total // shard_bytes))
    bases = dict(zip(map(str, files), [0, 5, 6, 18]))
    covered = {str(f): [] for f in files}
    for shard in plan:
        low = total * shard.index // num_shards if num_shards else shard.index * shard_bytes
        high = total * (shard.index + 1) // num_shards if num_shards else min(low + shard_bytes, total)
        for path, format, start, end in shard.spans:
            assert low <= bases[path] + start < bases[path] + end <= high and format == "lines"
            covered[path].append((start, end))
    for path, size in zip(covered, sizes):  # each file exactly once, in order
        ranges = covered[path]
        assert ranges[0][0] == 0 and ranges[-1][1] == size
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_serialized_records_equal_protobuf_serialization():
    """The hand-written encoder gives tf.train.Example's own (deterministic) bytes."""
    rng = random.Random(0)
    for _ in range(200):
        n, p = rng.randint(5, 128), rng.randint(1, 20)
        instance = Instance(
            [rng.choice([0, 5, 127, 128, 16383, 16384, 65535, 65536, 200000]) for _ in range(n)],
            [rng.randint(0, 1) for _ in range(n)],
            sorted(rng.sample(range(n), min(p, n))),
            [rng.randint(0, 120000) for _ in range(min(p, n))],
            rng.random() < 0.5,
        )
        features = instance_features(instance, 128, 20)
        feature = {
            name: tf.train.Feature(float_list=tf.train.FloatList(value=value))
            if name == "masked_lm_weights"
            else tf.train.Feature(int64_list=tf.train.Int64List(value=value))
            for name, value in features.items()
        }
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        assert serialize_instance(instance, 128, 20) == example.SerializeToString(deterministic=True)


# ---------------------------------------------------------------- shards


def test_one_shard_is_the_original_recipe_and_manifest(tmp_path, tokenizer):
    count = shards.create_pretraining_data([require(SAMPLE)], tmp_path / "s.tfrecord", tokenizer, SMALL, progress=False)
    expected = expected_records(read_documents(SAMPLE), tokenizer, SMALL, 0)
    assert count == len(expected) > 20
    assert records(tmp_path / "s.tfrecord") == expected
    manifest = json.loads((tmp_path / "s.tfrecord.manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["instances"] == count
    assert manifest["recipe"]["random_seed"] == 7 and manifest["recipe"]["dupe_factor"] == 2
    assert manifest["tokenizer"]["vocab_size"] == 30522 and len(manifest["tokenizer"]["vocab_sha256"]) == 64
    assert manifest["shards"] == [
        {"index": 0, "output": "s.tfrecord", "documents": 3, "instances": count, "warnings": []}
    ]
    assert expand_files(f"{tmp_path}/s.tfrecord*") == [str(tmp_path / "s.tfrecord")]  # not the manifest


@pytest.fixture(scope="module")
def two_books():
    """Two Gutenberg books, 0.87 MB."""
    return [require(GUTENBERG / "chesterton-brown.txt"), require(GUTENBERG / "austen-persuasion.txt")]


@pytest.mark.slow
def test_shards_are_the_recipe_on_their_documents_whatever_the_workers(tmp_path, tokenizer, two_books):
    files = sorted(map(str, two_books))
    one = shards.create_pretraining_data(
        files, tmp_path / "w1" / "d", tokenizer, SMALL, shard_bytes=150_000, progress=False
    )
    two = shards.create_pretraining_data(
        files, tmp_path / "w2" / "d", tokenizer, SMALL, shard_bytes=150_000, workers=2, progress=False
    )
    assert one == two
    assert output_bytes(tmp_path / "w1") == output_bytes(tmp_path / "w2")
    _, _, plan = plan_shards(files, tmp_path / "w1" / "d", 150_000)
    assert [len(shard.spans) for shard in plan] == [1, 1, 1, 2, 1, 1]  # shard 3: one book's end, the other's start
    whole = [d for f in files for d in read_documents(f)]
    read = [read_shard(shard)[0] for shard in plan]
    assert [d for documents in read for d in documents] == whole  # every document in exactly one shard
    for shard, documents in zip(plan, read):
        assert records(tmp_path / "w1" / shard.output) == expected_records(documents, tokenizer, SMALL, shard.index)


def cli_arguments(*args):
    return ["create-pretraining-data", "--vocab", str(VOCAB_FILE), *map(str, args)]


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_same_bytes(tmp_path, two_books, capsys):
    """Killed (SIGKILL, in a process of its own) after its first shard, the run made again
    skips the finished shards and ends with the bytes of an uninterrupted run; the other
    runs are the CLI in this process."""
    from bert_keras_cli.cli import main

    args = ["--input", *two_books, "--shard-size", "0.05", "--dupe-factor", "3"]
    assert main(cli_arguments(*args, "--output", tmp_path / "straight" / "d")) == 0
    manifest = tmp_path / "killed" / "d.manifest.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "bert_keras_cli.cli", *cli_arguments(*args, "--output", tmp_path / "killed" / "d")],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        if manifest.exists() and json.loads(manifest.read_text())["shards"]:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    state = json.loads(manifest.read_text())
    assert 0 < len(state["shards"]) < len(state["plan"]) and state["status"] == "incomplete"
    capsys.readouterr()
    assert main(cli_arguments(*args, "--output", tmp_path / "killed" / "d")) == 0
    assert f"{len(state['shards'])} already done" in capsys.readouterr().err
    killed = output_bytes(tmp_path / "killed")
    assert killed == output_bytes(tmp_path / "straight")  # no .partial file left either
    assert main(cli_arguments(*args, "--seed", "1", "--output", tmp_path / "killed" / "d")) == 2
    assert "made with other settings (they differ in recipe)" in capsys.readouterr().err


def test_beam_direct_runner_writes_the_local_runners_bytes(tmp_path, tokenizer, two_books):
    from bert_keras.data.pretraining_beam import runner  # apache-beam is a dev dependency: CI runs this

    files = sorted(map(str, two_books))
    local = shards.create_pretraining_data(
        files, tmp_path / "local" / "d", tokenizer, SMALL, shard_bytes=300_000, progress=False
    )
    beam = shards.create_pretraining_data(
        files,
        tmp_path / "beam" / "d",
        tokenizer,
        SMALL,
        shard_bytes=300_000,
        progress=False,
        beam_runner=runner(["--runner=DirectRunner"]),
    )
    assert local == beam > 1000
    assert len(output_bytes(tmp_path / "local")) == 4  # 3 shards and the manifest
    assert output_bytes(tmp_path / "beam") == output_bytes(tmp_path / "local")


# ---------------------------------------------------------------- bad input


def test_empty_and_binary_files_are_skipped_by_name(tmp_path, tokenizer):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    files = [tmp_path / "empty.txt", tmp_path / "image.png", require(SAMPLE)]
    count = shards.create_pretraining_data(files, tmp_path / "out" / "d", tokenizer, SMALL, progress=False)
    manifest = json.loads((tmp_path / "out" / "d.manifest.json").read_text())
    assert manifest["skipped_inputs"] == [
        {"path": str(tmp_path / "empty.txt"), "reason": "empty file"},
        {"path": str(tmp_path / "image.png"), "reason": "binary file (NUL byte at offset 8)"},
    ]
    assert count == len(expected_records(read_documents(SAMPLE), tokenizer, SMALL, 0))
    with pytest.raises(
        ValueError, match=r"no instances .*skipped .*empty\.txt: empty file; skipped .*image\.png: binary"
    ):
        shards.create_pretraining_data(files[:2], tmp_path / "none" / "d", tokenizer, SMALL, progress=False)


def test_invalid_utf8_is_dropped_with_a_warning_naming_file_and_line(tmp_path, tokenizer):
    lines = require(SAMPLE).read_bytes().split(b"\n")
    lines[6] = lines[6][:10] + b"\xff\xc3" + lines[6][10:]
    (tmp_path / "bad.txt").write_bytes(b"\n".join(lines))
    count = shards.create_pretraining_data([tmp_path / "bad.txt"], tmp_path / "d", tokenizer, SMALL, progress=False)
    warnings = json.loads((tmp_path / "d.manifest.json").read_text())["shards"][0]["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith(f"{tmp_path / 'bad.txt'}:7: invalid UTF-8")
    assert count == len(expected_records(read_documents(SAMPLE), tokenizer, SMALL, 0))  # as the original


def test_a_single_document_is_a_clear_error_and_one_sentence_documents_are_kept(tmp_path, tokenizer):
    (tmp_path / "one.txt").write_text("Only one sentence here.\n")
    with pytest.raises(ValueError, match=r"one\.txt bytes 0-24: only 1 document, and next-sentence pairs need 2"):
        shards.create_pretraining_data([tmp_path / "one.txt"], tmp_path / "d", tokenizer, SMALL, progress=False)
    (tmp_path / "mixed.txt").write_text(require(SAMPLE).read_text() + "\n\nA one-sentence document.\n")
    documents = read_documents(tmp_path / "mixed.txt")
    assert documents[-1] == ["A one-sentence document."]
    shards.create_pretraining_data([tmp_path / "mixed.txt"], tmp_path / "m", tokenizer, SMALL, progress=False)
    assert records(tmp_path / "m") == expected_records(documents, tokenizer, SMALL, 0)


def test_a_50_mb_line_is_skipped_by_file_and_line(tmp_path, tokenizer):
    sample = require(SAMPLE).read_bytes()
    with open(tmp_path / "long.txt", "wb") as file:
        file.write(sample + b"\n\nA short document.\n" + b"word " * 10_000_000 + b"\nIts last sentence.\n")
    shards.create_pretraining_data(
        [tmp_path / "long.txt"], tmp_path / "d", tokenizer, SMALL, shard_bytes=100 << 20, progress=False
    )
    warnings = json.loads((tmp_path / "d.manifest.json").read_text())["shards"][0]["warnings"]
    line = sample.count(b"\n") + 4
    assert warnings == [
        f"{tmp_path / 'long.txt'}:{line}: a line of 50000000 bytes (over 1048576) is not a sentence; skipped"
    ]
    documents = parse_documents(sample.decode() + "\n\nA short document.\nIts last sentence.\n", "lines")
    assert records(tmp_path / "d") == expected_records(documents, tokenizer, SMALL, 0)
