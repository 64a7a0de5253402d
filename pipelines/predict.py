"""`bert-keras predict`: a trained model over files of rows, a record per row.

MODEL is a task `.keras` file, a SavedModel export (`bert-keras export`) or a
checkpoint folder (Hugging Face BertFor*, a sentence-transformers folder: an embedder,
a CrossEncoder: a reranker, BertForMaskedLM: fill-mask). Inputs are `.txt` (a text a
line), `.tsv`/`.csv` with a header, `.jsonl` or `.parquet` (with pyarrow), many files
or globs; columns are the model's segment names unless mapped
with --column SEGMENT=COLUMN. Each output row carries the input row's id (--id-column,
else FILE:LINE). Rows are read a chunk at a time, batched by length and written back
in input order; a killed run continues when the same command runs again.

With --runner (an Apache Beam runner) the same records are made by Beam's RunInference
and written as OUT-SSSSS-of-NNNNN.jsonl shards in Beam's order, each record with its id;
Beam pipeline options follow the runner's name (--runner is the last flag).

Example: `bert-keras predict best.keras --input tickets.tsv --output labels.jsonl`.
"""

import sys

from bert_keras_cli.arguments import CheckpointPath, InputPath, add_runner_argument, beam_options


def register(subparsers):
    parser = subparsers.add_parser(
        "predict", help="run a model over text files, a record per row (resumable)", description=__doc__
    )
    parser.add_argument(
        "model",
        type=CheckpointPath,
        help="task .keras file, SavedModel export (BASE or BASE/VERSION), checkpoint folder or Hub name "
        "(ORG/NAME[@REVISION])",
    )
    parser.add_argument(
        "--input",
        required=True,
        nargs="+",
        type=InputPath,
        help="input files or globs (.txt .tsv .csv .jsonl .parquet)",
    )
    parser.add_argument(
        "--output",
        required=True,
        help="OUT.jsonl, OUT.tsv, OUT.parquet (with pyarrow), OUT.npy (an embedder's vectors) or OUT/ (a folder "
        "of an embedder's vectors in shards vectors-SSSSS-of-NNNNN.npy with ids-SSSSS-of-NNNNN.jsonl)",
    )
    parser.add_argument(
        "--column", action="append", default=[], metavar="SEGMENT=COLUMN", help="read a model input from a column"
    )
    parser.add_argument("--id-column", help="the column of row ids (default: FILE:LINE)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--chunk-size", type=int, help="rows read, predicted and written at a time (local runner; default 10000)"
    )
    parser.add_argument("--max-seq-length", type=int, help="default: the length the model was trained at")
    parser.add_argument(
        "--doc-stride", type=int, help="read long texts in windows this many pieces apart (heads with windows)"
    )
    parser.add_argument(
        "--compute-dtype",
        choices=["float32", "bfloat16"],
        help="default: the model's own. bfloat16: weights and matmuls in bfloat16, faster on CPUs with "
        "AVX512-BF16/AMX; outputs stay float32 (not for a SavedModel export: export it with --compute-dtype)",
    )
    _add_answer_flags(parser)
    _add_run_flags(parser)
    add_runner_argument(parser, "; a Beam runner writes OUT-SSSSS-of-NNNNN.jsonl shards")
    parser.set_defaults(func=run)


def _add_run_flags(parser):
    """What the run does with a bad row and with an earlier run into the same OUT."""
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start over: replace OUT, and the parts of a stopped run (which resumes only on the same command, "
        "model and input files)",
    )
    parser.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="a bad row (invalid UTF-8, a missing column): stop with an error, or write an error record and go on",
    )


def _add_answer_flags(parser):
    """What a head's records hold and how vectors are sharded."""
    parser.add_argument("--all-scores", action="store_true", help="a classifier's probability of every class")
    parser.add_argument("--top-k", type=int, default=5, help="a fill-mask model's fillers for each [MASK]")
    parser.add_argument(
        "--top-k-per-query",
        type=int,
        metavar="K",
        help="a reranker: write each query's K best rows by score (query, rank, id, score), not every row",
    )
    parser.add_argument("--shard-rows", type=int, default=100_000, help="rows of each .npy shard of OUT/")


def column_map(flags):
    """SEGMENT=COLUMN flags -> a dict."""
    columns = {}
    for flag in flags:
        segment, equals, column = flag.partition("=")
        if not equals or not segment or not column:
            raise ValueError(f"--column {flag}: write SEGMENT=COLUMN, e.g. text=body")
        columns[segment] = column
    return columns


def run(args):
    pipeline_options = beam_options(args)
    if pipeline_options is not None:
        if args.chunk_size is not None:
            raise ValueError("--chunk-size is the local runner's; a Beam runner batches and writes by itself")
        return _run_on_beam(args, pipeline_options)
    from bert_keras.serving.batch import predict_files

    chunks = {} if args.chunk_size is None else {"chunk_size": args.chunk_size}
    local = dict(shard_rows=args.shard_rows, overwrite=args.overwrite)
    summary = predict_files(
        args.model, args.input, args.output, _predict_options(args), **chunks, **local, **_rows(args)
    )
    if summary["notice"]:
        print(f"predict: {summary['notice']}", file=sys.stderr)
    errors = f", {summary['errors']} rows in error" if summary["errors"] else ""
    if args.top_k_per_query is None:
        print(f"wrote {summary['rows']} rows to {args.output}{errors}")
    else:
        best = f"each query's best {args.top_k_per_query} of {summary['rows']} rows predicted"
        print(f"wrote {summary['records']} records to {args.output} ({best}){errors}")
    return 0


def _predict_options(args):
    from bert_keras.serving.batch import PredictOptions

    return PredictOptions(
        batch_size=args.batch_size,
        all_scores=args.all_scores,
        max_seq_length=args.max_seq_length,
        doc_stride=args.doc_stride,
        top_k=args.top_k,
        compute_dtype=args.compute_dtype,
    )


def _rows(args):
    """The flags on rows that the local run and a Beam run share, as keyword arguments."""
    return dict(
        columns=column_map(args.column) or None,
        id_column=args.id_column,
        on_error=args.on_error,
        top_k_per_query=args.top_k_per_query,
    )


def _run_on_beam(args, pipeline_options):
    from bert_keras.serving.batch.beam import predict_on_beam

    shards = predict_on_beam(
        args.model, args.input, args.output, pipeline_options, _predict_options(args), **_rows(args)
    )
    print(f"wrote {len(shards)} shards: {', '.join(shards)}")
    return 0
