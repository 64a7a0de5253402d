"""One identity for a resumable job: its settings and the content of every model and data
file it reads. A job records it beside its work when it starts and compares it when it
resumes, so nothing resumes across a change (a model file replaced, a line added to the
training data) and every difference is named in one message.

A file's content is its size and SHA-256; a file over `WHOLE_DIGEST_BYTES` is its size,
modification time and the SHA-256 of its first and last `END_BLOCK_BYTES` (reading a
100 GB corpus whole on every resume would cost more than the resume saves). A folder
is the content of each file in it; a TF1 checkpoint prefix (`model.ckpt`) the files it
names; a glob the files it matches. A model in memory is the digest of its weights."""

import glob
import hashlib
import json
import os
from pathlib import Path

import numpy as np

WHOLE_DIGEST_BYTES = 64 << 20
END_BLOCK_BYTES = 1 << 20
READ_BYTES = 4 << 20


class RunChanged(ValueError):
    """What a job finds on disk is the unfinished work of other settings or inputs."""


def job_identity(settings, inputs=None, outputs=()):
    """The identity of a job of these `settings` (JSON values; compared as read back)
    reading `inputs`: name -> a path (file, folder, checkpoint prefix, glob), a list of
    them, or a model in memory. Files under the folders `outputs` (what the job writes,
    which may lie inside an input folder) are not its input."""
    outputs = [Path(folder).resolve() for folder in outputs]
    return {
        "settings": json.loads(json.dumps(settings, default=str)),
        "inputs": {name: _content(value, outputs) for name, value in (inputs or {}).items()},
    }


def input_paths(values, exclude=()):
    """The values of `values` (name -> value, e.g. a command's arguments) that name files
    or folders on disk, or lists of them: the inputs a job reads. `exclude`: names of
    folders the job writes (its output)."""
    found = {}
    for name, value in values.items():
        if name in exclude or value is None:
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        if items and all(isinstance(item, (str, Path)) and _paths_of(item) for item in items):
            found[name] = [str(item) for item in items] if isinstance(value, (list, tuple)) else str(value)
    return found


def fingerprint(path, outputs=()):
    """The content of the file, folder, checkpoint prefix or glob at `path`, less the files
    under the (resolved) folders `outputs`."""
    files = [file for file in _paths_of(path) if not any(file.resolve().is_relative_to(out) for out in outputs)]
    if not files:
        raise FileNotFoundError(f"no file at {path}")
    root = Path(path)
    if files == [root]:
        return {"path": str(root.resolve()), **_file_content(root)}
    base = root if root.is_dir() else root.parent
    return {
        "path": str(root.resolve()),
        "files": {
            str(file.relative_to(base)) if file.is_relative_to(base) else str(file): _file_content(file)
            for file in files
        },
    }


def weights_digest(model):
    """The SHA-256 of a Keras model's weights, in their order."""
    digest = hashlib.sha256()
    for weight in model.get_weights():
        array = np.ascontiguousarray(weight)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def json_digest(value):
    """The SHA-256 of data held in memory (JSON values: examples, labels), for a setting."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def differences(recorded, current, label="{}:".format):
    """Each way the identity `current` differs from `recorded`, as a phrase naming the
    setting (`label(name)`: a command shows its flags) or the file (empty: the same job)."""
    recorded = recorded if isinstance(recorded, dict) else {}
    found = []
    old_settings, new_settings = recorded.get("settings") or {}, current.get("settings") or {}
    for name in sorted(old_settings.keys() | new_settings.keys()):
        if old_settings.get(name) != new_settings.get(name):
            found.append(f"{label(name)} {_shown(old_settings.get(name))} there, {_shown(new_settings.get(name))} now")
    old_inputs, new_inputs = recorded.get("inputs") or {}, current.get("inputs") or {}
    for name in sorted(old_inputs.keys() | new_inputs.keys()):
        found += _input_differences(name, old_inputs.get(name), new_inputs.get(name))
    return found


def check(recorded, current, where, remedy, label="{}:".format):
    """Raises `RunChanged` naming every difference between the identity `recorded` in
    `where` and this job's `current` one (`differences`), ending with `remedy` (what the
    user can do)."""
    found = differences(recorded, current, label)
    if found:
        raise RunChanged(f"{where} holds the unfinished run of other inputs or settings ({'; '.join(found)}): {remedy}")


def write_record(path, identity):
    """`identity` into `path` (JSON), whole or not at all: a kill leaves the old record or none."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(identity, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def read_record(path, remedy):
    """The identity recorded in `path` (None: none there); a record that does not read as
    one is an error naming it, ending with `remedy`."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        recorded = None
    if not isinstance(recorded, dict) or not isinstance(recorded.get("settings"), dict):
        raise RunChanged(f"{path}: not a run record (cut short, or written by another version?): {remedy}")
    return recorded


def _content(value, outputs):
    if isinstance(value, (str, Path)):
        return fingerprint(value, outputs)
    if isinstance(value, (list, tuple)):
        return [fingerprint(item, outputs) for item in value]
    return {"path": f"<{type(value).__name__} in memory>", "weights_sha256": weights_digest(value)}


def _paths_of(path):
    """The files `path` names: itself, the files of a folder, of a checkpoint prefix, or of a glob."""
    text = str(path)
    if not text or "\n" in text:
        return []
    root = Path(text)
    if root.is_file():
        return [root]
    if root.is_dir():
        return sorted(file for file in root.rglob("*") if file.is_file())
    if glob.has_magic(text):
        return sorted(Path(file) for file in glob.glob(text, recursive=True) if Path(file).is_file())
    if Path(text + ".index").is_file():  # a TF1 checkpoint: PREFIX.index, PREFIX.data-*
        return sorted(file for file in root.parent.glob(glob.escape(root.name) + ".*") if file.is_file())
    return []


def _file_content(path):
    status = path.stat()
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        if status.st_size <= WHOLE_DIGEST_BYTES:
            for block in iter(lambda: stream.read(READ_BYTES), b""):
                digest.update(block)
            return {"bytes": status.st_size, "sha256": digest.hexdigest()}
        digest.update(stream.read(END_BLOCK_BYTES))
        stream.seek(-END_BLOCK_BYTES, os.SEEK_END)
        digest.update(stream.read(END_BLOCK_BYTES))
    return {"bytes": status.st_size, "mtime_ns": status.st_mtime_ns, "ends_sha256": digest.hexdigest()}


def _input_differences(name, old, new):
    if old is None or new is None:
        return [f"{name}: {_where(old)} there, {_where(new)} now"]
    old_items, new_items = (old, new) if isinstance(old, list) and isinstance(new, list) else ([old], [new])
    if len(old_items) != len(new_items):
        return [f"{name}: {len(old_items)} paths there, {len(new_items)} now"]
    return [
        f"{name} {_where(after)} {change}"
        for before, after in zip(old_items, new_items)
        if (change := _change(before, after))
    ]


def _change(old, new):
    """How the content `new` differs from `old` (None: it does not)."""
    content = ("bytes", "sha256", "mtime_ns", "ends_sha256", "weights_sha256")
    if "files" not in old and "files" not in new:
        if all(old.get(key) == new.get(key) for key in content):
            return None
        if "weights_sha256" in new:
            return "has other weights"
        return f"changed ({_size(old)} then, {_size(new)} now)" if "bytes" in old else "is another kind of input"
    old_files, new_files = old.get("files") or {}, new.get("files") or {}
    names = sorted(old_files.keys() | new_files.keys())
    changed = [file for file in names if old_files.get(file) != new_files.get(file)]
    if not changed:
        return None
    shown = ", ".join(
        f"{file} {'added' if file not in old_files else 'removed' if file not in new_files else 'changed'}"
        for file in changed[:3]
    )
    return f"changed: {shown}{f' and {len(changed) - 3} more' if len(changed) > 3 else ''}"


def _size(content):
    digest = content.get("sha256") or content.get("ends_sha256") or ""
    return f"{content.get('bytes', 0):,} bytes, sha256 {digest[:12]}"


def _where(content):
    return "nothing" if content is None else str(content.get("path") if isinstance(content, dict) else content)


def _shown(value):
    return "unset" if value is None else json.dumps(value, ensure_ascii=False)
