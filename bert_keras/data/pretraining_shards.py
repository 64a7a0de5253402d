"""Pre-training data at corpus scale: input shards made one at a time, in parallel, resumably.

The unit of work is an input shard: the documents that start in one slice of the input
bytes (the input files in order, read as one stream; `shard_bytes` per slice, or
`num_shards` equal slices). A document starts at the beginning of a file, at a blank
line in "lines" files and at the blank line before a chapter heading in "prose" files
(see `documents`), so a shard's documents are exactly those a whole-file read
gives. Each shard is made on its own, as google-research/bert's README tells users of the
original tool to do by hand (shard the input, run the tool on each shard): next-sentence
"random" segments come from other documents of the same shard, and shard k's instances
are those the original tool makes from the shard's documents with
`--random_seed=random_seed + k`. Its TFRecord file is therefore a pure function of
(seed, shard): any worker, any order and any rerun writes the same bytes, and memory
depends on the shard size, not the corpus size.

Files are written whole or not at all (a temporary name, then a rename). The manifest
`OUTPUT.manifest.json` records the settings (recipe, seed, vocabulary hash, inputs, shard
plan) and each finished shard's counts; it is updated as shards finish, so a rerun of the
same command skips them, and it refuses to mix in shards made with other settings.
"""

import bisect
import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import random
import sys
import time

import tensorflow as tf

from bert_keras.data.documents import (
    detect_format,
    is_heading,
    parse_documents,
    tokenize_documents,
    tokenizer_fingerprint,
)
from bert_keras.data.example_encoder import serialize_instance
from bert_keras.data.instances import InstanceMaker
from bert_keras.data.tfrecords import MANIFEST_SUFFIX, shard_names

# ~40 MB of records held per worker at dupe factor 10, ~250 documents of a novel's chapter size;
# small enough that N workers share out even a few shards evenly.
DEFAULT_SHARD_BYTES = 2 << 20
# Longer lines are dropped with a warning: no sentence is that long, and the recipe cuts
# over-long segments one random draw per token (a 50 MB line would take minutes).
MAX_LINE_BYTES = 1 << 20
MANIFEST_VERSION = 2
_BINARY_PROBE_BYTES = 8192


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The original tool's flags (its defaults) that decide the instances."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    whole_word_mask: bool = False
    random_seed: int = 12345

    def maker(self, vocabulary):
        return InstanceMaker(
            vocabulary,
            max_seq_length=self.max_seq_length,
            short_seq_prob=self.short_seq_prob,
            masked_lm_prob=self.masked_lm_prob,
            max_predictions_per_seq=self.max_predictions_per_seq,
            whole_word_mask=self.whole_word_mask,
        )


@dataclasses.dataclass(frozen=True)
class Shard:
    """Input shard `index`: the documents starting in byte range [start, end) of each span's file."""

    index: int
    output: str
    spans: tuple  # ((path, format, start, end), ...)


def plan_shards(input_files, output, shard_bytes=DEFAULT_SHARD_BYTES, num_shards=None, format="auto"):
    """Input files -> (inputs, skipped, shards); reads only the head of each file.

    `inputs` lists each usable file's path, size and document format; `skipped` names
    each empty or binary file and why (they make no documents).
    """
    inputs, skipped = [], []
    for path in input_files:
        path = str(path)
        size = tf.io.gfile.stat(path).length
        with tf.io.gfile.GFile(path, "rb") as file:
            head = file.read(_BINARY_PROBE_BYTES)
            if not head:
                skipped.append({"path": path, "reason": "empty file"})
                continue
            if b"\0" in head:
                skipped.append({"path": path, "reason": f"binary file (NUL byte at offset {head.index(0)})"})
                continue
            file_format = format
            if format == "auto":
                file.seek(0)
                lines = [file.readline() for _ in range(2000)]  # what detect_format looks at
                file_format = detect_format(b"".join(lines).decode("utf-8", errors="ignore"))
        inputs.append({"path": path, "bytes": size, "format": file_format})
    total = sum(item["bytes"] for item in inputs)
    if num_shards is not None:
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}")
        cuts = [total * k // num_shards for k in range(num_shards + 1)]
    else:
        if shard_bytes < 1:
            raise ValueError(f"shard_bytes must be >= 1, got {shard_bytes}")
        cuts = [*range(0, total, shard_bytes), total] if total else [0, 0]
    names = [os.path.basename(name) for name in shard_names(output, len(cuts) - 1)]
    spans = [[] for _ in names]
    base = 0  # of the file in the input stream
    for item in inputs:
        end = base + item["bytes"]
        k = bisect.bisect_right(cuts, base) - 1  # the first shard that can hold bytes of this file
        while k < len(names) and cuts[k] < end:
            start, stop = max(cuts[k], base) - base, min(cuts[k + 1], end) - base
            if start < stop:
                spans[k].append((item["path"], item["format"], start, stop))
            k += 1
        base = end
    return inputs, skipped, [Shard(k, name, tuple(spans[k])) for k, name in enumerate(names)]


def _is_blank(line):
    return not line.decode("utf-8", errors="ignore").strip()


def _is_heading(line):
    return is_heading(line.decode("utf-8", errors="ignore").strip())


def document_start(file, offset, format, size):
    """The first offset >= `offset` where a document starts (or `size`), in an open binary file.

    "lines": the start of a blank line. "prose": the start of the blank line just before
    a one-line heading paragraph. Cutting a file at such offsets splits no document.
    """
    if offset <= 0:
        return 0
    if offset >= size:
        return size
    file.seek(offset - 1)
    file.readline()  # now at the first line that starts at or after `offset`
    blank_at = None
    while True:
        position = file.tell()
        line = file.readline()
        if not line:
            return size
        if _is_blank(line):
            if format == "lines":
                return position
            blank_at = position
            continue
        if blank_at is not None and _is_heading(line):
            after = file.readline()
            if not after or _is_blank(after):
                return blank_at
        blank_at = None


def _line_number(path, offset):
    with tf.io.gfile.GFile(path, "rb") as file:
        line, done = 1, 0
        while done < offset:
            chunk = file.read(min(1 << 20, offset - done))
            line += chunk.count(b"\n")
            done += len(chunk)
        return line


def _drop_long_lines(raw, path, first, warnings):
    lines = raw.split(b"\n")
    long = [i for i, line in enumerate(lines) if len(line) > MAX_LINE_BYTES]
    if not long:
        return raw
    line_number = _line_number(path, first)
    for i in long:
        warnings.append(
            f"{path}:{line_number + i}: a line of {len(lines[i])} bytes (over {MAX_LINE_BYTES}) "
            "is not a sentence; skipped"
        )
    return b"\n".join(line for i, line in enumerate(lines) if len(line) <= MAX_LINE_BYTES)


def read_shard(shard):
    """A shard's documents (lists of sentences) and warnings about its input."""
    documents, warnings = [], []
    for path, format, start, end in shard.spans:
        size = tf.io.gfile.stat(path).length
        with tf.io.gfile.GFile(path, "rb") as file:
            first = document_start(file, start, format, size)
            last = document_start(file, end, format, size)
            file.seek(first)
            raw = file.read(last - first)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            text = None
            at = first + error.start
            warnings.append(
                f"{path}:{_line_number(path, at)}: invalid UTF-8 at byte {at}; "
                "invalid bytes are dropped, as the original tool does"
            )
        if len(raw) > MAX_LINE_BYTES:
            kept = _drop_long_lines(raw, path, first, warnings)
            if kept is not raw:
                raw, text = kept, None
        if text is None:
            text = raw.decode("utf-8", errors="ignore")
        documents.extend(parse_documents(text, format))
    return documents, warnings


def _describe(shard):
    return ", ".join(f"{path} bytes {start}-{end}" for path, _, start, end in shard.spans) or "no input"


class ShardMaker:
    """Makes one shard's TFRecord file: what each worker holds (a tokenizer and the recipe)."""

    def __init__(self, tokenizer, recipe):
        self.tokenizer = tokenizer
        self.recipe = recipe
        self.maker = recipe.maker(tokenizer.vocabulary)

    @classmethod
    def from_config(cls, tokenizer_config, recipe):
        """The maker of another process (a local worker or a Beam worker), from `tokenizer_config`."""
        from bert_keras.text.tokenizer import BertTokenizer

        return cls(BertTokenizer.from_config(tokenizer_config), recipe)

    def __call__(self, shard, directory):
        """Writes `directory/shard.output` (atomically) and returns the shard's manifest entry."""
        recipe = self.recipe
        documents, warnings = read_shard(shard)
        tokenized = tokenize_documents(documents, self.tokenizer)
        records = []
        if len(tokenized) == 1:
            warnings.append(
                f"{_describe(shard)}: only 1 document, and next-sentence pairs need 2 in a shard: "
                "no instances (use larger shards)"
            )
        elif not tokenized:
            warnings.append(f"{_describe(shard)}: no documents: no instances")
        else:
            records = self.maker.instances(
                tokenized,
                recipe.dupe_factor,
                random.Random(recipe.random_seed + shard.index),
                encode=lambda instance: serialize_instance(
                    instance, recipe.max_seq_length, recipe.max_predictions_per_seq
                ),
            )
        path = os.path.join(directory, shard.output)
        partial = f"{path}.partial"
        with tf.io.TFRecordWriter(partial) as writer:
            for record in records:
                writer.write(record)
        tf.io.gfile.rename(partial, path, overwrite=True)
        return {
            "index": shard.index,
            "output": shard.output,
            "documents": len(tokenized),
            "instances": len(records),
            "warnings": warnings,
        }


def manifest_path(output):
    return f"{output}{MANIFEST_SUFFIX}"


def write_manifest(output, settings, entries, complete):
    """Writes the manifest atomically: settings, finished shards in index order, totals."""
    entries = sorted(entries, key=lambda entry: entry["index"])
    manifest = {
        **settings,
        "status": "complete" if complete else "incomplete",
        "shards": entries,
        "documents": sum(entry["documents"] for entry in entries),
        "instances": sum(entry["instances"] for entry in entries),
        "empty_shards": [entry["output"] for entry in entries if not entry["instances"]],
    }
    path = manifest_path(output)
    with tf.io.gfile.GFile(f"{path}.partial", "w") as file:
        file.write(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    tf.io.gfile.rename(f"{path}.partial", path, overwrite=True)


def finished_shards(output, directory, settings):
    """Manifest entries of the shards a previous run of the same settings finished."""
    path = manifest_path(output)
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as file:
        previous = json.load(file)
    changed = sorted(key for key in settings if previous.get(key) != settings[key])
    if changed:
        raise ValueError(
            f"{output} was made with other settings (they differ in {', '.join(changed)}); "
            "remove it and its manifest, or choose another output"
        )
    return [e for e in previous["shards"] if tf.io.gfile.exists(os.path.join(directory, e["output"]))]


def tokenizer_config(tokenizer):
    """The tokenizer's config as plain data, to rebuild it in another process."""
    return {**tokenizer.get_config(), "vocabulary": list(tokenizer.vocabulary)}


def _worker_init(config, recipe):
    global _worker_maker
    _worker_maker = ShardMaker.from_config(config, recipe)


def _worker_make(shard_and_directory):
    return _worker_maker(*shard_and_directory)


def make_shards(shards, directory, tokenizer, recipe, workers=1):
    """Yields each shard's manifest entry as it is finished, by this process or `workers` processes."""
    jobs = [(shard, directory) for shard in shards]
    if workers <= 1 or len(jobs) <= 1:
        maker = ShardMaker(tokenizer, recipe)
        yield from (maker(*job) for job in jobs)
        return
    # Spawned: TensorFlow is not fork-safe. A worker that dies (e.g. out of memory) ends the
    # run with an error instead of leaving it waiting, as multiprocessing.Pool would.
    pool = concurrent.futures.ProcessPoolExecutor(
        min(workers, len(jobs)),
        multiprocessing.get_context("spawn"),
        _worker_init,
        (tokenizer_config(tokenizer), recipe),
    )
    try:
        futures = [pool.submit(_worker_make, job) for job in jobs]
        for future in concurrent.futures.as_completed(futures):
            yield future.result()
    except concurrent.futures.BrokenExecutor as error:
        raise RuntimeError(
            "a worker process died (killed, or out of memory?); the same command resumes: finished shards are kept"
        ) from error
    finally:
        pool.shutdown(cancel_futures=True)


def create_pretraining_data(
    input_files,
    output,
    tokenizer,
    recipe=Recipe(),
    format="auto",
    shard_bytes=DEFAULT_SHARD_BYTES,
    num_shards=None,
    workers=1,
    beam_runner=None,
    progress=True,
):
    """Text files -> TFRecords `output` (one shard) or `output-0000k-of-0000n`, and the manifest.

    Shards already finished by an earlier run with the same settings are kept.
    `workers` > 1 makes shards in that many processes; `beam_runner`
    (`pretraining_beam.runner(["--runner=DirectRunner", ...])`) makes the same shards on
    Apache Beam instead. Returns the number of instances in all shards.
    """
    log = (lambda message: print(message, file=sys.stderr, flush=True)) if progress else (lambda _: None)
    output = str(output)
    directory = os.path.dirname(output) or "."
    tf.io.gfile.makedirs(directory)
    inputs, skipped, shards = plan_shards(input_files, output, shard_bytes, num_shards, format)
    for item in skipped:
        log(f"skipping {item['path']}: {item['reason']}")
    settings = {
        "version": MANIFEST_VERSION,
        "recipe": dataclasses.asdict(recipe),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "inputs": inputs,
        "skipped_inputs": skipped,
        "plan": [{"output": shard.output, "spans": [list(span) for span in shard.spans]} for shard in shards],
    }
    entries = finished_shards(output, directory, settings)
    done = {entry["index"] for entry in entries}
    todo = [shard for shard in shards if shard.index not in done]
    log(
        f"{len(shards)} shard(s) of {sum(i['bytes'] for i in inputs)} bytes from {len(inputs)} file(s); "
        f"{len(done)} already done"
    )
    write_manifest(output, settings, entries, complete=not todo)
    if beam_runner is not None:
        beam_runner(todo, directory, tokenizer, recipe, output, settings, entries)
        with tf.io.gfile.GFile(manifest_path(output)) as file:
            entries = json.load(file)["shards"]
        for warning in (w for entry in entries if entry["index"] not in done for w in entry["warnings"]):
            log(f"warning: {warning}")
    else:
        bar = None
        if progress:
            import keras

            bar = keras.utils.Progbar(len(shards), unit_name="shard")
            bar.update(len(done))
        next_write = 0.0
        for entry in make_shards(todo, directory, tokenizer, recipe, workers):
            entries.append(entry)
            for warning in entry["warnings"]:
                log(f"warning: {warning}")
            complete = len(entries) == len(shards)
            if complete or time.monotonic() >= next_write:
                # The manifest grows with the shards: rewrite it at most 5% of the time.
                started = time.monotonic()
                write_manifest(output, settings, entries, complete)
                next_write = started + 20 * (time.monotonic() - started)
            if bar is not None:
                bar.update(len(entries))
    count = sum(entry["instances"] for entry in entries)
    empty = [entry["output"] for entry in entries if not entry["instances"]]
    if empty and count:
        log(
            f"warning: {len(empty)} of {len(shards)} shard file(s) hold no instances ({', '.join(empty)}; "
            "listed as empty_shards in the manifest): a worker of `pretrain --strategy multi_worker` given only "
            "these has no data; make fewer, larger shards"
        )
    if count == 0:
        raise ValueError(
            f"no instances from {', '.join(map(str, input_files))}: next-sentence pairs need at least "
            "2 non-empty documents in a shard"
            + "".join(f"; {warning}" for entry in entries for warning in entry["warnings"])
            + "".join(f"; skipped {item['path']}: {item['reason']}" for item in skipped)
        )
    return count
