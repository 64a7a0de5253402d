"""Distillation on SST-2: a fine-tuned teacher against its distilled student and the same
student trained on the labels alone, through their TF Serving exports, in one process.

For each model: SST-2 dev accuracy of its export, parameters and export size, latency of
one sentence a request (batch 1, median) and of the dev set in requests of 32 sentences
(rounds interleaved across the models, medians), and the training time its run recorded
(`eval_results.json` of `finetune`, `distill_results.json` of `distill`, same machine).

    bert-keras finetune glue --task sst-2 --data-dir ../shared/data/glue/SST-2 --output-dir T ...
    bert-keras distill --teacher T/best.keras --student teacher:3 --task sst-2 \\
        --data-dir ../shared/data/glue/SST-2 --output-dir D ...
    bert-keras distill ... --labels-only --output-dir B ...
    python bench/bench_distill.py --teacher T --distilled D --labels-only B [--rounds 5]

CoNLL-2003 and the embedder student (SQuAD retrieval) are not measured here yet.
"""

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
from bench_serving import probabilities, scratch_dir, sst2_dev, timed_rounds


def train_seconds(run_dir):
    """The training time a `finetune` or `distill` run wrote into its folder."""
    run_dir = Path(run_dir)
    if (run_dir / "distill_results.json").exists():
        return json.loads((run_dir / "distill_results.json").read_text())["train_seconds"]
    history = json.loads((run_dir / "eval_results.json").read_text())
    return next(entry["train_seconds"] for entry in history if "train_seconds" in entry)


def exported(run_dir):
    """(model, SessionPredictor of its export, export size in MB) of a run's best.keras."""
    import keras

    import bert_keras  # noqa: F401  (registers the classes the .keras file names)
    from bert_keras.serving import export
    from bert_keras.serving.tfserving.session import SessionPredictor

    model = keras.saving.load_model(Path(run_dir) / "best.keras", compile=False)
    path = export.export_for_serving(model, model.preprocessor, scratch_dir(), warmup_texts=())
    size = sum(file.stat().st_size for file in Path(path).rglob("*") if file.is_file()) / 2**20
    return model, SessionPredictor(path), size


def single_sentence_latency(predictors, sentences, rounds):
    """{name: median seconds of a one-sentence request}, requests interleaved across models."""
    times = {name: [] for name in predictors}
    for _ in range(rounds):
        for i in range(len(sentences)):
            for name, predictor in predictors.items():
                start = time.perf_counter()
                probabilities(predictor, sentences[i : i + 1], batch=1)
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(samples) for name, samples in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", required=True, help="the teacher's finetune --output-dir")
    parser.add_argument("--distilled", required=True, help="the distilled student's distill --output-dir")
    parser.add_argument("--labels-only", required=True, help="the labels-only student's distill --output-dir")
    parser.add_argument("--rounds", type=int, default=5, help="rounds over the dev set at batch 32")
    parser.add_argument("--single", type=int, default=100, help="dev sentences timed one a request, per round")
    args = parser.parse_args()

    sentences, labels = sst2_dev()
    runs = {"teacher": args.teacher, "distilled student": args.distilled, "labels-only student": args.labels_only}
    models, predictors, sizes = {}, {}, {}
    for name, run_dir in runs.items():
        models[name], predictors[name], sizes[name] = exported(run_dir)
        probabilities(predictors[name], sentences)  # warm-up: oneDNN kernels for each shape
    batch_times, outputs = timed_rounds(predictors, sentences, args.rounds)
    single = single_sentence_latency(predictors, sentences[: args.single], max(1, args.rounds // 2))
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), "?")
    print(f"\nSST-2 dev ({len(sentences)} sentences), TF1 session loader (TF Serving's path), {cpu}")
    print(
        f"{'model':22} {'layers':>6} {'params':>11} {'export MB':>9} {'dev acc':>8} {'% teacher':>9} "
        f"{'batch 1 ms':>10} {'batch 32 s':>10} {'x teacher':>9} {'train s':>8}"
    )
    teacher_accuracy = np.mean(outputs["teacher"].argmax(-1) == labels)
    teacher_batch = statistics.median(batch_times["teacher"])
    for name, model in models.items():
        accuracy = np.mean(outputs[name].argmax(-1) == labels)
        batch = statistics.median(batch_times[name])
        print(
            f"{name:22} {model.encoder.config.num_hidden_layers:6d} {model.count_params():11,d} {sizes[name]:9.1f} "
            f"{accuracy:8.4f} {accuracy / teacher_accuracy:9.1%} {1000 * single[name]:10.2f} {batch:10.3f} "
            f"{batch / teacher_batch:9.2f} {train_seconds(runs[name]):8.0f}"
        )


if __name__ == "__main__":
    main()
