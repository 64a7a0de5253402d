"""`predict_files`: a model over files of any size, a chunk of rows at a time.

Each chunk (`chunk_size` rows: memory does not grow with the input) is sorted by
length and run in batches each padded only to its own longest text, as the server's
length-sorted micro-batches, through the head's `ServingSignature` (what its export
answers, decoded the same way); its records go back in input order into a part of
`OUT.parts/`. A run killed at any moment resumes with the same call: finished parts
are kept, the rest are read again. The run ends with a notice of how many rows
truncation cut (`predictor.py`)."""

import dataclasses
import itertools
import sys
import time
from pathlib import Path

from bert_keras.models.dtype import warn_if_slow_bfloat16, with_dtype
from bert_keras.run_identity import job_identity
from bert_keras.serving.batch.options import PredictOptions
from bert_keras.serving.batch.predictor import BatchPredictor, RowPredictor, load_model
from bert_keras.serving.batch.ranking import QueryPredictor, top_per_query
from bert_keras.serving.batch.readers import RowReader, count_rows, input_files
from bert_keras.serving.batch.saved_model import SavedModelPredictor, saved_model_dir
from bert_keras.serving.batch.writers import PartsFolder, holds_vectors
from bert_keras.tasks.windowing import TruncationCounts
from bert_keras.training.progress import ProgressLines

ON_ERROR = ("raise", "skip")


def predict_files(
    model,
    inputs,
    output,
    options=None,
    *,
    columns=None,
    id_column=None,
    chunk_size=10000,
    on_error="raise",
    top_k_per_query=None,
    shard_rows=100_000,
    overwrite=False,
    stream=None,
):
    """Predicts every row of `inputs` (files or globs) with `model` (a path, a model
    already loaded, or a `predictor_for` one, whose own options then hold) into `output`
    (.jsonl, .tsv, .parquet, .npy or a folder `OUT/` of `.npy` shards of `shard_rows`
    rows), resuming a run of the same arguments that was stopped.
    `options` (`PredictOptions`) say how rows become records; `columns` maps the model's
    segment names to input columns; `id_column` names the rows' ids (default FILE:LINE);
    `top_k_per_query` writes a reranker's best passages of each query instead of every row
    (`ranking.py`). A run is resumed only on the same settings, model content and input
    content (`run_identity`); `overwrite` starts over, replacing OUT and a stopped run's
    parts. Progress lines go to `stream` (stderr). Returns a summary: rows predicted,
    records written, errors, truncated rows and the notice."""
    options = options or PredictOptions()
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    files = input_files(inputs)
    recorded = dataclasses.asdict(options)
    del recorded["batch_size"]  # the records do not depend on it
    settings = {
        **dict(columns=columns, id_column=id_column, chunk_size=chunk_size, on_error=on_error),
        **{name: value for name, value in recorded.items() if name != "compute_dtype" or value},
        **({"top_k_per_query": top_k_per_query} if top_k_per_query else {}),
    }
    predictor = predictor_for(model, options)
    if top_k_per_query is not None:
        predictor = QueryPredictor(predictor, top_k_per_query)
    if holds_vectors(output) and predictor.kind != "embedder":
        raise ValueError(
            f"{output}: .npy holds an embedder's vectors; write .jsonl, .tsv or .parquet for a {predictor.kind}"
        )
    identity = job_identity(settings, {"model": _model_source(model), "inputs": files})
    parts = PartsFolder(output, identity, shard_rows, overwrite)
    choices = predictor.segments[-1] if predictor.choices else None
    rows = iter(RowReader(files, predictor.segments, columns, id_column, choices))
    done = parts.finished_chunks()
    _run_chunks(predictor, parts, rows, done, chunk_size, on_error, stream or sys.stderr, count_rows(files))
    return _finish(parts, predictor, top_k_per_query)


def _model_source(model):
    """What identifies `model` in a run's record: its path, else the model in memory."""
    if isinstance(model, (str, Path)):
        return model
    if isinstance(model, SavedModelPredictor):
        return model.path
    return model.model if isinstance(model, BatchPredictor) else model


def predictor_for(model, options=None):
    """A `SavedModelPredictor` for an export, else a `BatchPredictor` of the model (or the
    one at that path), with `options` (`PredictOptions`); a predictor built before is
    used as it is (many runs share its traced function)."""
    options = options or PredictOptions()
    if isinstance(model, RowPredictor):
        return model
    if isinstance(model, (str, Path)) and saved_model_dir(model) is not None:
        if fixed := options.fixed_by_an_export:
            raise ValueError(
                f"{model} is an export: its length, windows and dtype were fixed when it was exported "
                f"(got {', '.join(f'{name}={value}' for name, value in fixed.items())})"
            )
        return SavedModelPredictor(model, options.batch_size, options.all_scores)
    model = load_model(model) if isinstance(model, (str, Path)) else model
    if options.compute_dtype is not None:
        if options.compute_dtype == "bfloat16":
            warn_if_slow_bfloat16("predict in bfloat16")
        model = with_dtype(model, options.compute_dtype)
    return BatchPredictor(
        model, options.batch_size, options.all_scores, options.max_seq_length, options.doc_stride, options.top_k
    )


def _run_chunks(predictor, parts, rows, done, chunk_size, on_error, stream, total):
    skipped = sum(1 for _ in itertools.islice(rows, done * chunk_size))
    progress = ProgressLines(total or None, "row", "predict: ", every_seconds=10.0, stream=stream)
    start, index, rows_done = time.perf_counter(), done, skipped
    if done:
        print(f"predict: resuming after {done} finished chunks ({skipped} rows)", file=stream, flush=True)
    while chunk := list(itertools.islice(rows, chunk_size)):
        parts.write_chunk(index, predictor.predict_rows(chunk, on_error))
        index, rows_done = index + 1, rows_done + len(chunk)
        rate = (rows_done - skipped) / max(time.perf_counter() - start, 1e-9)
        eta = f", ETA {max(total - rows_done, 0) / rate:.0f}s" if total and rate > 0 else ""
        progress.update(rows_done, suffix=eta)


def _finish(parts, predictor, top_k_per_query):
    errors, dropped = 0, TruncationCounts()
    for record in parts.records(vectors=False):
        errors += "error" in record
        dropped = dropped.add(record.get("truncated_pieces", 0))
    notice = predictor.truncation_notice(dropped)
    ranking = None if top_k_per_query is None else (lambda: top_per_query(parts.records, top_k_per_query))
    written = parts.assemble(ranking)
    return {"rows": dropped.texts, "records": written, "errors": errors, "truncated": dropped.cut, "notice": notice}
