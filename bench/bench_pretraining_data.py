"""`create-pretraining-data` at corpus scale: throughput per process and for N workers, peak memory.

Every row runs `bert-keras create-pretraining-data` with the original tool's defaults
(bert-base-uncased vocab, dupe factor 10, 128 tokens, seed 12345) as a subprocess and
reports its wall time (start-up included: about 5 s of importing TensorFlow per process),
MB/s of input text, instances/s and the peak RSS of its largest process (the command or a
worker). The larger corpora repeat the Gutenberg books (symbolic links named copy-K-BOOK),
10 or 100 times. Peers in the same run:

- "one shard": `--num-shards 1`, the whole corpus in one unit of work, as the original tool
  (and this command before it was sharded) holds it: memory grows with the corpus;
- "2 MiB shards": the default (`--shard-size`), memory bounded by the shard size;
- the same with `--workers N`;
- "previous version": the command as it was before sharding (commit PREVIOUS_COMMIT, run from a
  `git archive` of that commit), 1x corpus only: it holds every instance in memory.

"per process" rows time the shard-making alone in this process (no start-up): the recipe's
own speed. "vs 1 process" is the N-worker run's speed-up over one process on the same corpus; the
start-up (about 2.5 s in the command, then as long again in the workers) weighs less as the corpus grows.

    python bench/bench_pretraining_data.py --quick   # 1x and 3x corpus, < 3 minutes
    python bench/bench_pretraining_data.py           # 1x, 10x and 100x (about 15 minutes)
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
PREVIOUS_COMMIT = "43d608d"  # the last commit whose create-pretraining-data held the corpus in memory
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT))

from bench.measure import (  # noqa: E402
    Report,
    Stopwatch,
    add_json_argument,
    load_average,
    machine_line,
    run_command,
)


def corpus(books, copies, folder):
    """The books, or `copies` links to each (copy-K-BOOK)."""
    if copies == 1:
        return books
    folder.mkdir(exist_ok=True)
    files = []
    for k in range(copies):
        for book in books:
            link = folder / f"copy-{k:03d}-{Path(book).name}"
            if not link.exists():
                link.symlink_to(book)
            files.append(str(link))
    return files


def create_pretraining_data(files, output, vocab, *flags, source=ROOT):
    """(seconds, peak RSS in MB of the largest process) of one CLI run of the code in `source`."""
    command = [
        sys.executable,
        "-m",
        "bert_keras_cli.cli",
        "create-pretraining-data",
        "--input",
        *files,
        "--output",
        str(output),
        "--vocab",
        str(vocab),
        *flags,
    ]
    finished = run_command(command, cwd=source, env={**os.environ, "PYTHONPATH": str(source)})
    if finished["returncode"] != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{finished['stderr'][-3000:]}")
    return finished["seconds"], finished["peak_mb"]


def count_records(output):
    import tensorflow as tf

    return sum(1 for _ in tf.data.TFRecordDataset(sorted(glob.glob(f"{output}*[0-9]")) or [str(output)]))


def previous_version(folder):
    """A copy of the code at PREVIOUS_COMMIT, or None without git history."""
    archive = subprocess.run(
        ["git", "archive", PREVIOUS_COMMIT, "bert_keras", "pipelines"], cwd=ROOT, capture_output=True
    )
    if archive.returncode:
        return None
    folder.mkdir()
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def per_process(files, vocab, shard_bytes, num_shards=None):
    """(seconds, instances) of making every shard in this process, start-up excluded."""
    from bert_keras import BertTokenizer
    from bert_keras.data import pretraining_shards as shards
    from bert_keras.data.input_shards import plan_shards

    tokenizer = BertTokenizer(str(vocab))
    tokenizer(["warm-up: the first call sets up the tokenizer's kernels"])
    maker = shards.ShardMaker(tokenizer, shards.Recipe())
    with tempfile.TemporaryDirectory() as folder:
        with Stopwatch() as watch:
            _, _, plan = plan_shards(files, f"{folder}/data", shard_bytes, num_shards)
            instances = sum(maker(shard, folder)["instances"] for shard in plan)
        return watch.seconds, instances


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1x and 3x corpus only (< 3 minutes)")
    parser.add_argument("--books", default=str(SHARED / "data" / "pretraining" / "gutenberg"))
    parser.add_argument("--vocab", default=str(SHARED / "data" / "vocab" / "vocab.txt"))
    parser.add_argument("--workers", type=int, default=2)
    add_json_argument(parser)
    args = parser.parse_args(argv)
    report = Report("bench_pretraining_data", vars(args))
    books = sorted(glob.glob(f"{args.books}/*.txt"))
    if not books:
        raise SystemExit(f"no books in {args.books}")
    megabytes = sum(Path(b).stat().st_size for b in books) / 1e6
    print(machine_line(report.machine))
    print(f"corpus 1x: {len(books)} Gutenberg books, {megabytes:.2f} MB\n")

    from bert_keras.data.input_shards import DEFAULT_SHARD_BYTES

    rows, seconds_of = [], {}

    def add(name, scale, seconds, instances, rss=None, speedup=""):
        seconds_of[name, scale] = seconds
        report.add(f"{name}, {scale}x", "MB/s", [megabytes * scale / seconds], instances=instances, peak_rss_mb=rss)
        rows.append(
            (
                name,
                f"{scale}x",
                f"{seconds:.1f}",
                f"{megabytes * scale / seconds:.2f}",
                f"{instances / seconds:.0f}",
                "" if rss is None else f"{rss:.0f}",
                speedup,
            )
        )
        print(" | ".join(rows[-1]), flush=True)

    sharded = f"{DEFAULT_SHARD_BYTES / 2**20:g} MiB shards"
    one_process, n_workers = f"{sharded}, 1 process", f"{sharded}, {args.workers} workers"
    plan = []  # (name, copies, flags)
    for copies in [1, 3] if args.quick else [1, 10, 100]:
        if copies <= 10:  # 100x in one shard would hold about 11 GB
            plan.append(("one shard, 1 process", copies, ["--num-shards", "1"]))
        plan.append((one_process, copies, []))
        plan.append((n_workers, copies, ["--workers", str(args.workers)]))

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        seconds, instances = per_process(books, args.vocab, DEFAULT_SHARD_BYTES)
        add(f"per process: {sharded}", 1, seconds, instances)
        seconds, instances = per_process(books, args.vocab, DEFAULT_SHARD_BYTES, num_shards=1)
        add("per process: one shard", 1, seconds, instances)
        previous = previous_version(folder / "previous")
        if previous is not None:
            output = folder / "previous-run" / "data"
            output.parent.mkdir()
            seconds, rss = create_pretraining_data(books, output, args.vocab, source=previous)
            add(f"previous version ({PREVIOUS_COMMIT}), 1 process", 1, seconds, count_records(output), rss)
        for i, (name, copies, flags) in enumerate(plan):
            files = corpus(books, copies, folder / f"x{copies}")
            output = folder / f"run{i}" / "data"
            seconds, rss = create_pretraining_data(files, output, args.vocab, *flags)
            instances = json.loads(Path(f"{output}.manifest.json").read_text())["instances"]
            speedup = f"{seconds_of[one_process, copies] / seconds:.2f}x" if name == n_workers else ""
            add(name, copies, seconds, instances, rss, speedup)

    print(f"\nload average at end {load_average()[0]:.1f}\n")
    header = ("run", "corpus", "seconds", "MB/s", "instances/s", "peak RSS MB", "vs 1 process")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    main()
