"""Hugging Face Hub names as checkpoints (`bert_keras.hub`), as users give them: the real
huggingface_hub downloads all-MiniLM-L6-v2 from a local Hub (tests/hub_server.py) into a
cache of the test's, once; then, offline, `BertTextEmbedder.from_checkpoint(NAME)` and
`bert-keras embed --init NAME` give what the folder gives, a pinned revision gives its
own weights, and each failure is one line naming the repo."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from doc_blocks import block_run_by
from hub_server import Repo, hub_server, use_hub
from safetensors.numpy import load, load_file, save

from bert_keras import BertClassifier, BertEncoder, BertPretrainer, BertReranker, BertTextEmbedder, run_identity
from bert_keras.checkpoint import read_checkpoint
from bert_keras.hub import hub_name, resolve
from bert_keras_cli.arguments import check_input_paths
from bert_keras_cli.cli import build_parser
from bert_keras_cli.cli import main as cli
from bert_keras_cli.setup import command_identity

NAME = "sentence-transformers/all-MiniLM-L6-v2"
MAIN, PINNED = "1" * 40, "2" * 40  # the commits of the default branch and of tag v0
# What the repo on the Hub holds beside the model's files, which must never be fetched.
OTHER_FORMATS = {"pytorch_model.bin": b"torch", "tf_model.h5": b"h5", "onnx/model.onnx": b"onnx", "README.md": b"#"}
MODEL_FILES = {
    "config.json",
    "model.safetensors",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
}
TEXTS = ["A man is eating food.", "The new movie is awesome", "Hugging Face hosts models."]
TOLERANCE = 1e-6
ROOT = Path(__file__).resolve().parents[1]


def folder_files(folder):
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def pinned_weights(folder):
    """The weights of the pinned commit: all-MiniLM-L6-v2's with its word embeddings halved."""
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["embeddings.word_embeddings.weight"] = tensors["embeddings.word_embeddings.weight"] * 0.5
    return save(tensors)


def sharded(files):
    """`files` with model.safetensors split in two shards and their index, as
    save_pretrained(max_shard_size=...) writes a model too big for one file."""
    tensors = load(files["model.safetensors"])
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    index = {"metadata": {}, "weight_map": {name: shard for shard, part in halves.items() for name in part}}
    shards = {shard: save({name: tensors[name] for name in part}) for shard, part in halves.items()}
    rest = {name: data for name, data in files.items() if name != "model.safetensors"}
    return {**rest, **shards, "model.safetensors.index.json": json.dumps(index).encode()}


@pytest.fixture(scope="module")
def hub(tmp_path_factory, minilm_dir):
    """The cache one first download leaves (HF_HOME), the requests it made, the pinned
    commit's files as a local folder, and the server, still answering."""
    base = tmp_path_factory.mktemp("hub")
    minilm = folder_files(Path(minilm_dir))
    pinned = {**minilm, "model.safetensors": pinned_weights(Path(minilm_dir))}
    pinned_folder = base / "pinned"
    for name, data in pinned.items():
        (pinned_folder / name).parent.mkdir(parents=True, exist_ok=True)
        (pinned_folder / name).write_bytes(data)
    bert = b'{"model_type": "bert", "hidden_size": 8}'
    repos = {
        NAME: Repo({MAIN: {**minilm, **OTHER_FORMATS}, PINNED: pinned}, {"main": MAIN, "v0": PINNED}),
        "acme/pytorch-only": Repo(
            {MAIN: {"config.json": bert, "vocab.txt": b"[PAD]\n", **OTHER_FORMATS}}, {"main": MAIN}
        ),
        "acme/gpt2": Repo({MAIN: {"config.json": b'{"model_type": "gpt2"}', "model.safetensors": b""}}, {"main": MAIN}),
        "acme/minilm-sharded": Repo({MAIN: {**sharded(minilm), **OTHER_FORMATS}}, {"main": MAIN}),
        "acme/gated": Repo({MAIN: {"config.json": bert}}, {"main": MAIN}, gated=True),
    }
    with hub_server(repos) as server, pytest.MonkeyPatch.context() as patch:
        use_hub(patch, base / "home", server.url)
        snapshot = resolve(NAME)
        first = list(server.requests)
        yield {
            "home": base / "home",
            "snapshot": snapshot,
            "requests": first,
            "pinned": pinned_folder,
            "server": server,
        }


@pytest.fixture
def offline(hub, monkeypatch):
    use_hub(monkeypatch, hub["home"])
    return hub


@pytest.fixture
def online(hub, monkeypatch):
    use_hub(monkeypatch, hub["home"], hub["server"].url)
    return hub


@pytest.fixture(scope="module")
def folder_vectors(minilm_dir):
    return BertTextEmbedder.from_checkpoint(minilm_dir).encode(TEXTS)


def test_names_and_paths_are_told_apart(tmp_path, monkeypatch):
    assert hub_name(NAME) == (NAME, None)
    assert hub_name(f"{NAME}@v0") == (NAME, "v0")
    assert hub_name(f"hf://{NAME}@refs/pr/3") == (NAME, "refs/pr/3")
    for path in ("./org/name", "/org/name", "runs/best.keras", "model.ckpt", "org/name/extra", "auto", "org/name@"):
        assert hub_name(path) is None, path
    monkeypatch.chdir(tmp_path)
    (tmp_path / "google-bert" / "bert-base-uncased").mkdir(parents=True)
    assert hub_name("google-bert/bert-base-uncased") is None  # a local folder wins


def test_a_first_download_fetches_only_the_model_files_into_the_shared_cache_layout(hub):
    fetched = {path.split(f"/resolve/{MAIN}/", 1)[1] for method, path in hub["requests"] if "/resolve/" in path}
    downloads = [path for method, path in hub["requests"] if method == "GET" and "/resolve/" in path]
    assert fetched == MODEL_FILES and len(downloads) == len(MODEL_FILES)
    snapshot = hub["snapshot"]
    repo_folder = hub["home"] / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2"
    assert snapshot.commit == MAIN and snapshot.path == repo_folder / "snapshots" / MAIN
    assert (repo_folder / "refs" / "main").read_text() == MAIN
    assert {path.relative_to(snapshot.path).as_posix() for path in snapshot.path.rglob("*") if path.is_file()} == (
        MODEL_FILES
    )
    assert len(list((repo_folder / "blobs").iterdir())) == len(MODEL_FILES)
    assert str(snapshot) == f"resolved {NAME}@main to commit {MAIN} ({snapshot.path})"


@pytest.mark.slow
def test_a_name_offline_embeds_as_the_folder(offline, folder_vectors):
    for name in (NAME, f"hf://{NAME}", f"{NAME}@main"):
        vectors = BertTextEmbedder.from_checkpoint(name).encode(TEXTS)
        np.testing.assert_allclose(vectors, folder_vectors, atol=TOLERANCE, err_msg=name)


@pytest.mark.slow
def test_embed_command_with_a_name_offline(offline, folder_vectors, tmp_path, capsys):
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    assert cli(["embed", "--init", NAME, "--input", str(lines), "--output", str(tmp_path / "vectors.npy")]) == 0
    assert f"resolved {NAME}@main to commit {MAIN} ({offline['snapshot'].path})" in capsys.readouterr().out
    np.testing.assert_allclose(np.load(tmp_path / "vectors.npy"), folder_vectors, atol=TOLERANCE)


@pytest.mark.slow
def test_predict_command_with_a_name_offline(offline, folder_vectors, tmp_path, capsys):
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    assert cli(["predict", f"hf://{NAME}", "--input", str(lines), "--output", str(tmp_path / "out.npy")]) == 0
    assert f"resolved {NAME}@main to commit {MAIN}" in capsys.readouterr().out
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), folder_vectors, atol=TOLERANCE)


@pytest.mark.slow
def test_a_pinned_revision_gives_its_weights(online, folder_vectors):
    pinned = BertTextEmbedder.from_checkpoint(online["pinned"]).encode(TEXTS)
    assert np.abs(pinned - folder_vectors).max() > 1e-2  # the two commits' models differ
    for name, revision in ((NAME, "v0"), (f"{NAME}@v0", None), (f"{NAME}@{PINNED}", None), (NAME, PINNED)):
        vectors = BertTextEmbedder.from_checkpoint(name, revision=revision).encode(TEXTS)
        np.testing.assert_allclose(vectors, pinned, atol=TOLERANCE, err_msg=f"{name} revision={revision}")
    encoder = BertEncoder.from_checkpoint(NAME, revision="v0")
    words = keras.ops.convert_to_numpy(encoder.embeddings.word_embeddings)
    expected = load_file(str(online["pinned"] / "model.safetensors"))["embeddings.word_embeddings.weight"]
    np.testing.assert_array_equal(words, expected)
    with pytest.raises(ValueError, match=f"^{NAME}@v0 names revision v0, and revision='main' another$"):
        BertEncoder.from_checkpoint(f"{NAME}@v0", revision="main")
    with pytest.raises(ValueError, match="^revision='v0' is for Hugging Face Hub names .ORG/NAME., not the path /"):
        BertEncoder.from_checkpoint(online["pinned"], revision="v0")


def test_a_sharded_model_downloads_its_shards_and_reads_as_the_folder(online, minilm_dir):
    snapshot = resolve("acme/minilm-sharded")
    held = {path.name for path in snapshot.path.iterdir()}
    shards = {"model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    assert shards <= held and "model.safetensors" not in held and "pytorch_model.bin" not in held
    sharded, whole = read_checkpoint("acme/minilm-sharded"), read_checkpoint(minilm_dir)
    settings = [{**found.embedding, "encoder": None} for found in (sharded, whole)]  # pooling, normalize, ...
    assert sharded.weights.keys() == whole.weights.keys() and settings[0] == settings[1]
    for name, value in whole.weights.items():
        np.testing.assert_array_equal(sharded.weights[name], value, err_msg=name)


def test_a_broken_shard_index_is_one_line_naming_the_file(tmp_path, minilm_dir):
    shutil.copy(Path(minilm_dir) / "config.json", tmp_path)
    index = tmp_path / "model.safetensors.index.json"
    for content, message in (
        ("[]", "not a safetensors index with a weight_map"),
        ('{"weight_map": {"a": "../elsewhere.safetensors"}}', "the weight_map must name shard files beside it"),
        ('{"weight_map": {"a": "model-00001-of-00001.safetensors"}}', "cannot read .*model-00001-of-00001"),
    ):
        index.write_text(content)
        with pytest.raises(ValueError, match=message) as raised:
            read_checkpoint(tmp_path)
        assert "\n" not in str(raised.value) and str(tmp_path) in str(raised.value)


@pytest.mark.parametrize(
    "cls, arguments",
    [(BertClassifier, {"num_classes": 2}), (BertReranker, {}), (BertPretrainer, {"new_heads": True})],
)
def test_every_head_takes_a_revision(online, cls, arguments):
    model = cls.from_checkpoint(NAME, revision="v0", **arguments)
    words = keras.ops.convert_to_numpy(model.encoder.embeddings.word_embeddings)
    expected = load_file(str(online["pinned"] / "model.safetensors"))["embeddings.word_embeddings.weight"]
    np.testing.assert_array_equal(words, expected)


def test_a_finetune_run_records_the_resolved_snapshot(online, tmp_path):
    """The run identity holds the snapshot folder (repo and commit in its path) and its
    files' content: resuming on another commit of the same name is a difference named."""
    identities = []
    for revision in ("main", "v0"):
        args = build_parser().parse_args(
            ["finetune", "tsv", "--train", __file__, "--dev", __file__, "--output-dir", str(tmp_path)]
            + ["--init", f"{NAME}@{revision}"]
        )
        check_input_paths(args)
        identities.append(command_identity(args))
    main, pinned = identities
    assert main["settings"]["init"].endswith(f"models--sentence-transformers--all-MiniLM-L6-v2/snapshots/{MAIN}")
    weights = main["inputs"]["init"]["files"]["model.safetensors"]
    assert weights["bytes"] == (online["snapshot"].path / "model.safetensors").stat().st_size
    assert set(main["inputs"]["init"]["files"]) == MODEL_FILES
    differences = run_identity.differences(main, pinned)
    assert any(PINNED in line and line.startswith("init:") for line in differences), differences


@pytest.mark.slow
def test_a_local_folder_named_like_a_repo_wins(offline, tmp_path, monkeypatch, folder_vectors):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(offline["pinned"], tmp_path / NAME)
    requests = len(offline["server"].requests)
    local = BertTextEmbedder.from_checkpoint(NAME).encode(TEXTS)
    np.testing.assert_allclose(local, BertTextEmbedder.from_checkpoint(offline["pinned"]).encode(TEXTS), atol=0)
    assert np.abs(local - folder_vectors).max() > 1e-2 and len(offline["server"].requests) == requests


def test_an_uncached_name_offline_is_one_line(offline, capsys):
    with pytest.raises(
        FileNotFoundError, match=r"^acme/bert-tiny@v1 is not in the Hugging Face cache \(HF_HUB_OFFLINE=1\)"
    ):
        BertTextEmbedder.from_checkpoint("acme/bert-tiny@v1")
    assert cli(["predict", "acme/bert-tiny", "--input", __file__, "--output", "unused.jsonl"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("bert-keras predict: error: acme/bert-tiny@main is not in the Hugging Face cache")
    assert error.count("\n") == 1


@pytest.mark.parametrize(
    "name, error, message",
    [
        (
            "acme/missing",
            FileNotFoundError,
            "no checkpoint at acme/missing: no such local path, and no model acme/missing",
        ),
        (f"{NAME}@nope", FileNotFoundError, f"{NAME} has no revision nope (a branch, tag or commit)"),
        (
            "acme/gated",
            PermissionError,
            "acme/gated is gated: accept its conditions on https://huggingface.co/acme/gated",
        ),
        (
            "acme/gpt2",
            ValueError,
            f"acme/gpt2 (commit {MAIN}) describes a 'gpt2' model (config.json's model_type), not BERT",
        ),
        (
            "acme/pytorch-only",
            FileNotFoundError,
            f"acme/pytorch-only (commit {MAIN}) has no model.safetensors "
            "(it holds pytorch_model.bin, tf_model.h5, onnx/model.onnx): ",
        ),
    ],
)
def test_hub_failures_are_one_line_naming_the_repo(online, name, error, message):
    with pytest.raises(error) as raised:
        BertEncoder.from_checkpoint(name)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)
    if name == "acme/pytorch-only":
        assert "save_pretrained(FOLDER, safe_serialization=True)" in str(raised.value)
        assert not [path for method, path in online["server"].requests if path.endswith("pytorch_model.bin")]


def test_convert_reads_a_name(offline, capsys, tmp_path, minilm_dir):
    target = tmp_path / "converted"
    assert cli(["convert", f"{NAME}@main", str(target), "--to", "hf"]) == 0
    assert f"resolved {NAME}@main to commit {MAIN}" in capsys.readouterr().out
    written, original = read_checkpoint(target).weights, read_checkpoint(minilm_dir).weights
    assert written.keys() == original.keys()
    for name, value in original.items():
        np.testing.assert_array_equal(written[name], value, err_msg=name)


@pytest.mark.slow
def test_the_hub_name_snippet_runs(offline, folder_vectors):
    namespace = {}
    exec(block_run_by("tests/test_hub.py::" + "test_the_hub_name_snippet_runs").text, namespace)
    np.testing.assert_allclose(namespace["vectors"][0], folder_vectors[0], atol=TOLERANCE)


def test_a_command_resolves_a_name_before_tensorflow_loads(tmp_path):
    """In a new process, as a user runs it: the environment variables alone set the cache
    and offline mode, and an uncached name ends the command before TensorFlow loads."""
    code = (
        "import sys; from bert_keras_cli.cli import main; code = main(sys.argv[1:]); "
        "print(code, 'tensorflow' in sys.modules)"
    )
    env = {**os.environ, "HF_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.pop("HF_HUB_CACHE", None)
    argv = ["embed", "--init", "hf://acme/bert-tiny@v2", "--input", __file__, "--output", "v.npy"]
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert out.stdout.split() == ["2", "False"], out.stderr
    assert out.stderr.strip() == (
        "bert-keras embed: error: acme/bert-tiny@v2 is not in the Hugging Face cache (HF_HUB_OFFLINE=1): "
        f"{tmp_path / 'home' / 'hub'} holds no complete snapshot of it; run once online to download it"
    )
