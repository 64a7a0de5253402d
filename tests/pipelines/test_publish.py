"""Publishing, as a user does it: `finetune tsv --init ORG/NAME` on a tiny model from a
local Hub (tests/hub_server.py), then `convert --to hf` writes a model card whose YAML
huggingface_hub's own parser reads (library, pipeline tag, the Hub repo the run started
from, tags) with the run's labels, dev metrics and command; `push` uploads that folder
through huggingface_hub's create-repo, preupload and commit calls, and what the Hub
then holds loads in bert-keras with the trained model's logits. Failures (no token, a
refused token, a read-only one, no such organisation) are one line naming the repo."""

import json

import keras
import numpy as np
import pytest
from harness import tiny_embedder_folder
from hub_server import Repo, hub_server, use_hub
from huggingface_hub import ModelCard, metadata_load

from bert_keras import BertClassifier, BertTextEmbedder
from bert_keras_cli.cli import main as cli

BASE, COMMIT = "acme/tiny-bert", "4" * 40
TOKENS = {"hf_write": "write", "hf_read": "read"}
TEXTS = ["the film is good", "the film is bad", "a quick brown fox jumps", "the lazy dog"]
LABELS = ["good", "bad", "good", "bad"]
HF_FILES = {"README.md", "config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The local Hub, holding the tiny base model (a sentence-transformers folder)."""
    base = tmp_path_factory.mktemp("publish")
    folder = tiny_embedder_folder(base / "tiny-bert")
    files = {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    with hub_server({BASE: Repo({COMMIT: files}, {"main": COMMIT})}, TOKENS, organizations={"acme"}) as server:
        yield {"server": server, "base": base, "embedder": folder}


@pytest.fixture
def online(hub, monkeypatch):
    use_hub(monkeypatch, hub["base"] / "home", hub["server"].url)
    monkeypatch.setenv("HF_TOKEN", "hf_write")
    return hub


@pytest.fixture(scope="module")
def run(hub):
    """A fine-tuning run (one step) started from the base model's Hub name."""
    base = hub["base"]
    (base / "train.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in zip(TEXTS, LABELS)))
    with pytest.MonkeyPatch.context() as patch:
        use_hub(patch, base / "home", hub["server"].url)
        train = ["--train", str(base / "train.tsv"), "--dev", str(base / "train.tsv")]
        flags = ["--max-train-steps", "1", "--epochs", "1", "--batch-size", "4", "--max-seq-length", "32"]
        flags += ["--verbose", "0"]
        assert cli(["finetune", "tsv", "--init", BASE, *train, "--output-dir", str(base / "run"), *flags]) == 0
    return base / "run"


def logits(model):
    return keras.ops.convert_to_numpy(model.predict(TEXTS, verbose=0))


@pytest.mark.slow  # the fine-tuning run (36 s with TensorFlow's start) and its check (15 s)
def test_convert_writes_the_model_card_of_the_run(run, hub, tmp_path):
    record = json.loads((run / "run.json").read_text())
    assert record["init"]["repo_id"] == BASE and record["init"]["commit"] == COMMIT
    assert cli(["convert", str(run / "best.keras"), "--to", "hf", str(tmp_path / "hf")]) == 0
    card_file = tmp_path / "hf" / "README.md"
    metadata = metadata_load(card_file)
    assert metadata == ModelCard.load(card_file).data.to_dict()
    assert metadata["library_name"] == "transformers" and metadata["pipeline_tag"] == "text-classification"
    assert metadata["base_model"] == BASE and {"bert-keras", "text-classification"} <= set(metadata["tags"])
    text = card_file.read_text()
    epochs = [entry for entry in json.loads((run / "eval_results.json").read_text()) if "epoch" in entry]
    assert f"| 1 | {epochs[0]['accuracy']:.4f} |" in text and "| 0 | bad |\n| 1 | good |" in text
    assert f"trained from `{BASE}@{COMMIT}`" in text
    assert f"bert-keras finetune tsv --init {BASE} --train {hub['base'] / 'train.tsv'}" in text
    assert 'AutoModelForSequenceClassification.from_pretrained("' in text
    trained = keras.saving.load_model(run / "best.keras")
    np.testing.assert_allclose(logits(BertClassifier.from_checkpoint(tmp_path / "hf")), logits(trained), atol=1e-6)


@pytest.mark.slow  # the fine-tuning run, shared with the test above
def test_push_uploads_what_bert_keras_loads_back(run, online, capsys):
    server = online["server"]
    assert cli(["push", str(run / "best.keras"), "acme/tiny-sst", "--private", "--commit-message", "first"]) == 0
    assert server.created[-1] == {"name": "tiny-sst", "organization": "acme", "visibility": "private"}
    assert server.commits[-1] == {"repo_id": "acme/tiny-sst", "revision": "main", "summary": "first"}
    repo = server.repos["acme/tiny-sst"]
    pushed = repo.commits[repo.refs["main"]]
    assert set(pushed) == HF_FILES | {".gitattributes"}
    card = pushed["README.md"].decode()
    assert server.cards[-1] == card and ModelCard(card).data.base_model == BASE
    assert 'AutoModelForSequenceClassification.from_pretrained("acme/tiny-sst")' in card
    assert f"pushed {run / 'best.keras'} to acme/tiny-sst (" in capsys.readouterr().out
    trained = keras.saving.load_model(run / "best.keras")
    downloaded = BertClassifier.from_checkpoint("acme/tiny-sst")
    assert downloaded.labels == ["bad", "good"]
    np.testing.assert_allclose(logits(downloaded), logits(trained), atol=1e-6)

    # A Hugging Face folder goes up as it is, here onto a new branch; main stays.
    main = repo.refs["main"]
    assert cli(["push", str(online["embedder"]), "acme/tiny-sst", "--revision", "dev"]) == 0
    assert repo.refs["main"] == main and "modules.json" in repo.commits[repo.refs["dev"]]
    assert server.commits[-1]["summary"] == "Upload tiny-bert with bert-keras"


def test_an_embedder_card_is_for_sentence_transformers(hub, tmp_path):
    BertTextEmbedder.from_checkpoint(hub["embedder"]).save(tmp_path / "embedder.keras")
    assert cli(["convert", str(tmp_path / "embedder.keras"), "--to", "hf", str(tmp_path / "embedder")]) == 0
    metadata = metadata_load(tmp_path / "embedder" / "README.md")
    assert metadata["library_name"] == "sentence-transformers" and metadata["pipeline_tag"] == "sentence-similarity"
    assert "base_model" not in metadata and {"bert-keras", "feature-extraction"} <= set(metadata["tags"])
    assert (tmp_path / "embedder" / "modules.json").is_file()


@pytest.mark.parametrize(
    "token, repo_id, message",
    [
        (None, "acme/x", "pushing to acme/x needs a Hugging Face token with write access: set HF_TOKEN"),
        ("hf_wrong", "acme/x", "the Hugging Face Hub refused the token for acme/x (401)"),
        ("hf_read", "acme/x", "the token has no write access to acme/x (403)"),
        ("hf_write", "ghost/x", "ghost/x: the Hugging Face Hub answered 404 (no such organisation, repo or branch)"),
    ],
)
def test_push_failures_are_one_line(online, monkeypatch, capsys, token, repo_id, message):
    if token is None:
        monkeypatch.delenv("HF_TOKEN")
    else:
        monkeypatch.setenv("HF_TOKEN", token)
    commits = len(online["server"].commits)
    assert cli(["push", str(online["embedder"]), repo_id]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"bert-keras push: error: {message}") and error.count("\n") == 1, error
    assert len(online["server"].commits) == commits
