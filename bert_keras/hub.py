"""The Hugging Face Hub, both ways. Names as checkpoints: `ORG/NAME`, `ORG/NAME@REVISION`
(a branch, tag or commit) or `hf://ORG/NAME[@REVISION]` becomes the local snapshot folder
of the files a model needs, downloaded once into the shared Hugging Face cache (what
transformers users downloaded is reused), with the commit it resolved to; a local path
always wins over a name. `kaggle://` handles (keras-hub presets on Kaggle) become the
folder kagglehub downloads them to. Folders published: `upload` pushes one to a repo.
huggingface_hub reads HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE, HF_TOKEN and HF_ENDPOINT.
Imports no TensorFlow: the commands resolve names before it loads."""

import dataclasses
import os
import re
from pathlib import Path

from bert_keras.config import check_model_type, read_config_json

PREFIX = "hf://"
KAGGLE_PREFIX = "kaggle://"
# The files bert-keras reads (Hugging Face and sentence-transformers folders, their module
# sub-folders): never pytorch_model.bin, tf_model.h5, flax, onnx/, openvino/ or rust_model.ot.
MODEL_FILES = [
    "config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "model-*-of-*.safetensors",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "labels.txt",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "[0-9]_*/*.json",
    "[0-9]_*/vocab.txt",
    "[0-9]_*/model.safetensors",
    "metadata.json",
]
# A Keras preset's files (keras-hub's `save_to_preset`, as the Hub's keras/ models hold
# them), fetched when the first files show one (its metadata.json names a Keras version).
PRESET_FILES = [
    "config.json",
    "metadata.json",
    "*.weights.h5",
    "task.json",
    "preprocessor.json",
    "tokenizer.json",
    "assets/*",
    "assets/*/*",
]
PART = r"[A-Za-z0-9][\w.-]*"
REPO_ID = re.compile(rf"{PART}/{PART}")
# Names that are local files however they are spelt: a missing one is reported as a path.
LOCAL_SUFFIXES = (".keras", ".ckpt", ".index", ".h5", ".json", ".txt", ".safetensors", ".bin")
SAFETENSORS_HELP = (
    "bert-keras reads safetensors only (pickles run code when loaded): convert it where transformers "
    "and torch are installed with save_pretrained(FOLDER, safe_serialization=True), or open a pull "
    "request with https://huggingface.co/spaces/safetensors/convert and pass ORG/NAME@refs/pr/N"
)


@dataclasses.dataclass(frozen=True)
class HubSnapshot:
    """A Hub name resolved: `repo_id`, the `revision` asked for (None: the default
    branch), the `commit` it resolved to and the local snapshot folder `path`."""

    repo_id: str
    revision: str | None
    commit: str
    path: Path

    @property
    def name(self):
        return f"{self.repo_id}@{self.revision or 'main'}"

    def __str__(self):
        return f"resolved {self.name} to commit {self.commit} ({self.path})"


def hub_name(source):
    """(repo_id, revision or None) when `source` names a Hub model and no local path; else None."""
    text = str(source)
    if _is_local(text):
        return None
    name = text.removeprefix(PREFIX)
    repo_id, _, revision = name.partition("@")
    if (
        not REPO_ID.fullmatch(repo_id)
        or ("@" in name and not revision)
        or (not text.startswith(PREFIX) and _looks_like_file(repo_id))
    ):
        return None
    return repo_id, revision or None


def local_checkpoint(source, revision=None):
    """The local path of a checkpoint `source` (a path, or a Hub name resolved by
    `resolve`, or a `kaggle://` handle: `kaggle_download`); `revision` applies to Hub
    names only."""
    if hub_name(source) is not None:
        return resolve(source, revision).path
    if is_kaggle_handle(source) and revision is None:
        return kaggle_download(source)
    if revision is not None:
        raise ValueError(f"revision={revision!r} is for Hugging Face Hub names (ORG/NAME), not the path {source}")
    return source


def resolve(source, revision=None):
    """The `HubSnapshot` of a Hub name: its model files downloaded into the Hugging Face
    cache (or found there), checked to hold safetensors weights of a BERT model. Every
    failure is a one-line error naming the repo."""
    parsed = hub_name(source)
    if parsed is None:
        raise FileNotFoundError(f"{source} is a local path or no Hugging Face name (ORG/NAME[@REVISION])")
    repo_id, named_revision = parsed
    if revision is not None and named_revision is not None and revision != named_revision:
        raise ValueError(f"{source} names revision {named_revision}, and revision={revision!r} another")
    revision = revision or named_revision
    name = f"{repo_id}@{revision or 'main'}"
    folder = Path(_download(repo_id, revision, name))
    snapshot = HubSnapshot(repo_id, revision, folder.name, folder)
    _check_model(snapshot)
    return snapshot


def is_kaggle_handle(source):
    return str(source).startswith(KAGGLE_PREFIX)


def kaggle_download(handle):
    """The local folder of a Kaggle model handle
    (`kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]`, as keras-hub names its presets),
    downloaded by kagglehub into its cache (or found there); a one-line error naming it
    otherwise."""
    name = str(handle).removeprefix(KAGGLE_PREFIX)
    if len(name.split("/")) not in (4, 5) or not all(name.split("/")):
        raise ValueError(f"{handle}: a Kaggle handle is kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]")
    try:
        import kagglehub
        from kagglehub.exceptions import BackendError, KaggleApiHTTPError, NotFoundError, UnauthenticatedError
    except ImportError:
        raise ValueError(f"{handle}: kaggle:// handles are downloaded with kagglehub (pip install kagglehub)") from None
    try:
        return Path(kagglehub.model_download(name))
    except (BackendError, KaggleApiHTTPError, NotFoundError, UnauthenticatedError, OSError) as error:
        raise FileNotFoundError(f"{handle}: kagglehub could not download it: {_line(error)}") from None


def upload(folder, repo_id, revision=None, private=False, commit_message=None):
    """Uploads the files of `folder` to the model repo `repo_id` (created when new,
    `private` then; `revision`: a branch, made from main when new) as one commit with the
    token of HF_TOKEN or `hf auth login`. Returns the commit's URL. Every failure is a
    one-line error naming the repo."""
    from huggingface_hub import HfApi, errors, get_token
    from huggingface_hub.errors import HfHubHTTPError

    # What huggingface_hub's HTTP client raises when the Hub cannot be reached.
    unreachable = (OSError, getattr(errors, "HTTPError", OSError))

    if not REPO_ID.fullmatch(repo_id):
        raise ValueError(f"{repo_id} is no Hugging Face repo name (ORG/NAME)")
    token = get_token()
    if token is None:
        raise PermissionError(
            f"pushing to {repo_id} needs a Hugging Face token with write access: set HF_TOKEN (or run `hf auth login`)"
        )
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            revision=revision,
            commit_message=commit_message or f"Upload {Path(folder).name} with bert-keras",
        )
    except HfHubHTTPError as error:
        raise _upload_error(repo_id, error) from None
    except unreachable as error:
        raise ConnectionError(f"pushing to {repo_id}: the Hugging Face Hub cannot be reached: {_line(error)}") from None
    except ValueError as error:  # the Hub's check of README.md's metadata
        raise ValueError(f"pushing to {repo_id}: {_line(error)}") from None
    return commit.commit_url


def _upload_error(repo_id, error):
    status = getattr(error.response, "status_code", None)
    if status == 401:
        return PermissionError(
            f"the Hugging Face Hub refused the token for {repo_id} (401): set HF_TOKEN to a valid one"
        )
    if status == 403:
        return PermissionError(
            f"the token has no write access to {repo_id} (403): use a write token of that user or organisation"
        )
    if status == 404:
        return FileNotFoundError(f"{repo_id}: the Hugging Face Hub answered 404 (no such organisation, repo or branch)")
    return ValueError(f"pushing to {repo_id}: the Hugging Face Hub answered {_line(error)}")


def snapshot_origin(path):
    """{"repo_id", "commit"} of a snapshot folder in the Hugging Face cache (the layout
    `models--ORG--NAME/snapshots/COMMIT`, which the Hub's names cannot be confused with:
    they hold no `--`), or None for any other path."""
    path = Path(path)
    repo = path.parent.parent.name
    if path.parent.name != "snapshots" or not repo.startswith("models--") or repo.count("--") != 2:
        return None
    return {"repo_id": repo.removeprefix("models--").replace("--", "/"), "commit": path.name}


def _is_local(text):
    return os.path.exists(text) or os.path.exists(text + ".index") or text.startswith((".", "/", "~"))


def _looks_like_file(repo_id):
    return repo_id.endswith(LOCAL_SUFFIXES)


def _download(repo_id, revision, name):
    from huggingface_hub import constants, errors, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    # huggingface_hub 2 says a snapshot cached in part with its own error; earlier ones return it.
    not_cached = (LocalEntryNotFoundError, getattr(errors, "IncompleteSnapshotError", LocalEntryNotFoundError))

    cache = constants.HF_HUB_CACHE
    try:
        folder = snapshot_download(repo_id, revision=revision, allow_patterns=MODEL_FILES)
        if _is_keras_preset(Path(folder)):
            folder = snapshot_download(repo_id, revision=Path(folder).name, allow_patterns=PRESET_FILES)
        return folder
    except GatedRepoError:
        raise PermissionError(
            f"{repo_id} is gated: accept its conditions on https://huggingface.co/{repo_id} "
            "and set HF_TOKEN (or run `hf auth login`)"
        ) from None
    except RevisionNotFoundError:
        raise FileNotFoundError(f"{repo_id} has no revision {revision} (a branch, tag or commit)") from None
    except RepositoryNotFoundError:
        raise FileNotFoundError(
            f"no checkpoint at {repo_id}: no such local path, and no model {repo_id} on the Hugging Face Hub "
            "(if it is private, set HF_TOKEN)"
        ) from None
    except not_cached as error:
        if constants.HF_HUB_OFFLINE:
            raise FileNotFoundError(
                f"{name} is not in the Hugging Face cache (HF_HUB_OFFLINE=1): {cache} holds no complete "
                "snapshot of it; run once online to download it"
            ) from None
        raise FileNotFoundError(
            f"{name} is no local path, not in the Hugging Face cache ({cache}), and the Hub could not be "
            f"reached: {_line(error)}"
        ) from None
    except HfHubHTTPError as error:
        raise ValueError(f"{name}: the Hugging Face Hub answered {_line(error)}") from None


def _is_keras_preset(folder):
    try:
        return "keras_version" in read_config_json(folder / "metadata.json")
    except (OSError, ValueError):
        return False


def _check_model(snapshot):
    """A snapshot without safetensors weights or of a model that is not BERT is an error
    naming the repo (a Keras preset is checked when it is read)."""
    where = f"{snapshot.repo_id} (commit {snapshot.commit})"
    if _is_keras_preset(snapshot.path):
        return
    config_file = snapshot.path / "config.json"
    if config_file.is_file():
        check_model_type(read_config_json(config_file), where)
    weights = ("model.safetensors", "model.safetensors.index.json", "[0-9]_*/model.safetensors")
    if not any(any(snapshot.path.glob(pattern)) for pattern in weights):
        held = [name for name in _repo_files(snapshot) if name.endswith((".bin", ".h5", ".msgpack", ".onnx", ".ot"))]
        holds = f" (it holds {', '.join(held)})" if held else ""
        raise FileNotFoundError(f"{where} has no model.safetensors{holds}: {SAFETENSORS_HELP}")


def _repo_files(snapshot):
    """The files of the snapshot's commit on the Hub (none when it cannot be asked)."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError

    if constants.HF_HUB_OFFLINE:
        return []
    try:
        return HfApi().list_repo_files(snapshot.repo_id, revision=snapshot.commit)
    except (HfHubHTTPError, OSError):
        return []


def _line(error):
    return " ".join(str(error).split())
