"""Pre-training data at corpus scale: input shards made one at a time, in parallel, resumably.

Each input shard (`input_shards`) is made on its own, as google-research/bert's README tells
users of the original tool to do by hand (shard the input, run the tool on each shard):
next-sentence "random" segments come from other documents of the same shard, and shard k's
instances are those the original tool makes from the shard's documents with
`--random_seed=random_seed + k`. Its TFRecord file is therefore a pure function of
(seed, shard): any worker, any order and any rerun writes the same bytes, and memory
depends on the shard size, not the corpus size.

Files are written whole or not at all (a temporary name, then a rename); the manifest
(`shard_manifest`) records each finished shard, so a rerun of the same command skips them.
"""

import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import random
import sys
import time

import keras
import tensorflow as tf

from bert_keras.data.documents import tokenize_documents, tokenizer_fingerprint
from bert_keras.data.example_encoder import serialize_instance
from bert_keras.data.input_shards import DEFAULT_SHARD_BYTES, describe_shard, plan_shards, read_shard
from bert_keras.data.instances import InstanceMaker
from bert_keras.data.shard_manifest import MANIFEST_VERSION, finished_shards, manifest_path, write_manifest
from bert_keras.text.tokenizer import BertTokenizer


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


class ShardMaker:
    """Makes one shard's TFRecord file: what each worker holds (a tokenizer and the recipe)."""

    def __init__(self, tokenizer, recipe):
        self.tokenizer = tokenizer
        self.recipe = recipe
        self.maker = recipe.maker(tokenizer.vocabulary)

    @classmethod
    def from_config(cls, tokenizer_config, recipe):
        """The maker of another process (a local worker or a Beam worker), from `tokenizer_config`."""
        return cls(BertTokenizer.from_config(tokenizer_config), recipe)

    def __call__(self, shard, directory):
        """Writes `directory/shard.output` (atomically) and returns the shard's manifest entry."""
        recipe = self.recipe
        documents, warnings = read_shard(shard)
        tokenized = tokenize_documents(documents, self.tokenizer)
        records = []
        if len(tokenized) == 1:
            warnings.append(
                f"{describe_shard(shard)}: only 1 document, and next-sentence pairs need 2 in a shard: "
                "no instances (use larger shards)"
            )
        elif not tokenized:
            warnings.append(f"{describe_shard(shard)}: no documents: no instances")
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


def _settings(recipe, tokenizer, inputs, skipped, shards):
    """What the manifest records so that a rerun makes the same shards, or refuses to mix."""
    return {
        "version": MANIFEST_VERSION,
        "recipe": dataclasses.asdict(recipe),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "inputs": inputs,
        "skipped_inputs": skipped,
        "plan": [{"output": shard.output, "spans": [list(span) for span in shard.spans]} for shard in shards],
    }


def _make_on_beam(beam_runner, todo, directory, tokenizer, recipe, output, settings, entries, log):
    """Runs the Beam pipeline, which writes the manifest; returns its entries."""
    done = {entry["index"] for entry in entries}
    beam_runner(todo, directory, tokenizer, recipe, output, settings, entries)
    with tf.io.gfile.GFile(manifest_path(output)) as file:
        entries = json.load(file)["shards"]
    for warning in (w for entry in entries if entry["index"] not in done for w in entry["warnings"]):
        log(f"warning: {warning}")
    return entries


def _make_locally(todo, total, directory, tokenizer, recipe, workers, output, settings, entries, log, progress):
    """Makes the shards in `workers` processes, updating the manifest as they finish; returns its entries."""
    bar = None
    if progress:
        bar = keras.utils.Progbar(total, unit_name="shard")
        bar.update(len(entries))
    next_write = 0.0
    for entry in make_shards(todo, directory, tokenizer, recipe, workers):
        entries.append(entry)
        for warning in entry["warnings"]:
            log(f"warning: {warning}")
        complete = len(entries) == total
        if complete or time.monotonic() >= next_write:
            # The manifest grows with the shards: rewrite it at most 5% of the time.
            started = time.monotonic()
            write_manifest(output, settings, entries, complete)
            next_write = started + 20 * (time.monotonic() - started)
        if bar is not None:
            bar.update(len(entries))
    return entries


def _count_instances(entries, total, input_files, skipped, log):
    """The instances in all shards; a warning for empty shards, an error when there are none."""
    count = sum(entry["instances"] for entry in entries)
    empty = [entry["output"] for entry in entries if not entry["instances"]]
    if empty and count:
        log(
            f"warning: {len(empty)} of {total} shard file(s) hold no instances ({', '.join(empty)}; "
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
    settings = _settings(recipe, tokenizer, inputs, skipped, shards)
    entries = finished_shards(output, directory, settings)
    done = {entry["index"] for entry in entries}
    todo = [shard for shard in shards if shard.index not in done]
    log(
        f"{len(shards)} shard(s) of {sum(i['bytes'] for i in inputs)} bytes from {len(inputs)} file(s); "
        f"{len(done)} already done"
    )
    write_manifest(output, settings, entries, complete=not todo)
    if beam_runner is not None:
        entries = _make_on_beam(beam_runner, todo, directory, tokenizer, recipe, output, settings, entries, log)
    else:
        entries = _make_locally(
            todo, len(shards), directory, tokenizer, recipe, workers, output, settings, entries, log, progress
        )
    return _count_instances(entries, len(shards), input_files, skipped, log)
