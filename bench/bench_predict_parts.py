"""`predict`'s parts folder for an embedder's vectors: disk used by `OUT.parts/` and the
seconds of writing the chunks and of the end (`runner._finish`: the count of errors and
truncations, then OUT assembled), for `--rows` random float32 vectors of `--width`, as
`records.embedder_record` gives them, in chunks of `--chunk-size`, for each `--outputs`.

The model is left out (its rows/s do not depend on the parts): the figures are those of
the writer on this path. To compare two versions, run each with its own PYTHONPATH,
alternating, e.g. a `git archive` of the older commit and the working tree:

    python bench/bench_predict_parts.py --rows 100000 --width 384 --outputs .npy,/,.parquet
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bert_keras.serving.batch import writers
from bert_keras.serving.batch.records import embedder_record
from bert_keras.serving.batch.runner import _finish

sys.path.append(str(Path(__file__).resolve().parents[1]))  # last: PYTHONPATH picks the bert_keras measured

from bench.measure import Report, add_json_argument, machine_line


class Predictor:
    """What `_finish` asks of a predictor: the truncation notice."""

    def truncation_notice(self, dropped):
        return None


def folder_bytes(folder):
    return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file())


def run(output, rows, width, chunk_size):
    generator = np.random.default_rng(0)
    parts = writers.PartsFolder(output, {"bench": True})
    seconds = 0.0
    for index in range(-(-rows // chunk_size)):
        count = min(chunk_size, rows - index * chunk_size)
        vectors = generator.standard_normal((count, width), dtype=np.float32)
        records = [
            {
                "id": f"in.txt:{index * chunk_size + row + 1}",
                **embedder_record({"embeddings": vectors}, row, {}, None, 0),
            }
            for row in range(count)
        ]
        start = time.perf_counter()
        parts.write_chunk(index, records)
        seconds += time.perf_counter() - start
    disk = folder_bytes(parts.folder)
    start = time.perf_counter()
    summary = _finish(parts, Predictor(), None)
    finish = time.perf_counter() - start
    assert summary["rows"] == rows, summary
    return disk, seconds, finish


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--chunk-size", type=int, default=10_000)
    parser.add_argument(
        "--outputs", default=".npy,/,.parquet", help="comma-separated: .npy, / (shards), .parquet, .jsonl"
    )
    add_json_argument(parser)
    args = parser.parse_args(argv)
    report = Report("bench_predict_parts", {**vars(args), "writers": writers.__file__})
    print(f"writers: {writers.__file__}; {machine_line(report.machine)}")
    print(f"{args.rows} rows x {args.width} float32, chunks of {args.chunk_size}")
    print("| output | OUT.parts/ MB | write chunks s | finish + assemble s |")
    print("|---|---|---|---|")
    for suffix in args.outputs.split(","):
        with tempfile.TemporaryDirectory(prefix="bench_parts_") as folder:
            output = str(Path(folder) / "out") + suffix if suffix != "/" else str(Path(folder) / "out") + "/"
            disk, write, finish = run(output, args.rows, args.width, args.chunk_size)
            print(f"| {suffix} | {disk / 1e6:.0f} | {write:.1f} | {finish:.1f} |", flush=True)
            report.add(f"{suffix}, write chunks", "s", [write], parts_mb=disk / 1e6)
            report.add(f"{suffix}, finish + assemble", "s", [finish])
            shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())
