"""Dynamic masking throughput: instances/s of `pretrain --corpus` data against peers.

All on the same text (default: the Gutenberg books), batches of 256 at seq 128 with 20
predictions, read as `fit` reads them, each peer in its own process pinned to 1 and to 2
cores (CPU affinity, so every thread TensorFlow starts shares those cores):

- bert-keras `dynamic_masking_dataset` (tf.data, MLM + NSP pairs), with its token cache
  (`token_cache`, as `pretrain --corpus` runs it: the text tokenized once into token
  files, every epoch reads those), and reading and tokenizing the text every epoch;
- the previous version: the Python generator of commit 43d608d (`git show` into a
  temporary module, run unchanged);
- keras-hub's in-graph `MaskedLMMaskGenerator` (MLM only: one segment per line, no A/B
  pairs) after the same tokenizer;
- `pretraining_dataset` on TFRecords made from the same text by `create-pretraining-data`
  (dupe factor 1), which parses a batch of records at once, and the same records parsed
  one at a time then batched, as Model Garden's BERT reader does
  (`official/nlp/data/pretrain_dataloader.py`: `parse_single_example` in `_decode`) and
  the original `run_pretraining.py`.

"first batch" is the start-up: reading and tokenizing up front (the generator, and
bert-keras filling an empty token cache) or the first files (tf.data). Rates are medians
of interleaved rounds, one process at a time, each timed over many epochs of the corpus
after its buffers have filled.

    python bench/bench_dynamic_masking.py [--rounds 3] [--batches 400] [--quick]
    python bench/bench_dynamic_masking.py --seq-length 512 --predictions 80 --quick  # phase 2
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.measure import (  # noqa: E402
    Report,
    Stopwatch,
    add_json_argument,
    add_peer_argument,
    answer_peer,
    machine_line,
    run_peer,
    timed,
)

SHARED = ROOT.parent / "shared"
PREVIOUS_COMMIT = "43d608d"  # the last commit with the Python generator
BATCH, SEQ, PREDICTIONS = 256, 128, 20
PEERS = {
    "cached": "bert-keras `tf.data` dynamic masking (`pretrain --corpus`: token cache)",
    "dynamic": "the same without the token cache (text read and tokenized every epoch)",
    "previous": f"previous version: Python generator ({PREVIOUS_COMMIT})",
    "keras_hub": "keras-hub `MaskedLMMaskGenerator` (MLM only, no pairs)",
    "records": "TFRecord reader (`pretraining_dataset`: a batch of records parsed at once)",
    "per_record": "TFRecord reader parsing one record at a time (as Model Garden's)",
}


def previous_dynamic_masking(files, tokenizer):
    """The generator of `PREVIOUS_COMMIT`, or None without git history."""
    try:
        source = subprocess.run(
            ["git", "show", f"{PREVIOUS_COMMIT}:bert_keras/pretraining_data.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "previous_pretraining_data.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("previous_pretraining_data", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dynamic_masking_dataset(files, tokenizer, BATCH, SEQ, PREDICTIONS, seed=0)


def keras_hub_masking(files, tokenizer):
    """Lines -> the same tokenizer -> [CLS] line [SEP] at SEQ -> MaskedLMMaskGenerator."""
    import tensorflow as tf

    try:
        import keras_hub
    except ImportError:
        return None
    packer = keras_hub.layers.StartEndPacker(
        sequence_length=SEQ,
        start_value=tokenizer.cls_id,
        end_value=tokenizer.sep_id,
        pad_value=0,
        return_padding_mask=True,
    )
    masker = keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=tokenizer.vocabulary_size,
        mask_selection_rate=0.15,
        mask_selection_length=PREDICTIONS,
        mask_token_id=tokenizer.mask_id,
        unselectable_token_ids=[0, tokenizer.cls_id, tokenizer.sep_id],
    )

    def features(lines):
        ids, mask = packer(tokenizer.tokenize(lines))
        masked = masker(ids)
        return {
            "input_word_ids": masked["token_ids"],
            "input_mask": tf.cast(mask, tf.int32),
            "masked_lm_positions": masked["mask_positions"],
            "masked_lm_ids": masked["mask_ids"],
            "masked_lm_weights": masked["mask_weights"],
        }

    dataset = tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.data.TextLineDataset, cycle_length=len(files), num_parallel_calls=tf.data.AUTOTUNE
    )
    dataset = dataset.filter(lambda line: tf.strings.length(tf.strings.strip(line)) > 0).repeat()
    dataset = dataset.batch(BATCH, drop_remainder=True).map(features, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def per_record_reader(records):
    """Model Garden's BertPretrainDataLoader steps: parse_single_example, int64 -> int32, batch."""
    import tensorflow as tf

    from bert_keras.data.tfrecords import MODEL_NAMES

    spec = {name: tf.io.FixedLenFeature([SEQ], tf.int64) for name in ("input_ids", "input_mask", "segment_ids")}
    spec.update(
        {name: tf.io.FixedLenFeature([PREDICTIONS], tf.int64) for name in ("masked_lm_positions", "masked_lm_ids")}
    )
    spec["masked_lm_weights"] = tf.io.FixedLenFeature([PREDICTIONS], tf.float32)
    spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)

    def decode(record):
        example = tf.io.parse_single_example(record, spec)
        return {MODEL_NAMES.get(k, k): tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in example.items()}

    dataset = tf.data.TFRecordDataset(records).repeat().shuffle(10000, seed=0)
    dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


def make_records(files, vocab, directory):
    output = Path(directory) / "corpus.tfrecord"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from bert_keras_cli.cli import main; main()",
            "create-pretraining-data",
            "--input",
            *files,
            "--output",
            str(output),
            "--vocab",
            vocab,
            "--dupe-factor",
            "1",
            "--num-shards",
            str(len(files)),
            "--max-seq-length",
            str(SEQ),
            "--max-predictions-per-seq",
            str(PREDICTIONS),
        ],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return sorted(str(path) for path in Path(directory).glob("corpus.tfrecord*") if not path.name.endswith(".json"))


def measure(peer, files, vocab, records, warmup, batches):
    """In a pinned peer process: {"rate": instances/s, "first": seconds} or None."""
    from bert_keras import BertTokenizer
    from bert_keras.data.dynamic_masking import dynamic_masking_dataset
    from bert_keras.data.tfrecords import pretraining_dataset

    watch = Stopwatch()
    tokenizer = BertTokenizer(vocab)
    dataset = {
        "dynamic": lambda: dynamic_masking_dataset(files, tokenizer, BATCH, SEQ, PREDICTIONS),
        "cached": lambda: dynamic_masking_dataset(
            files, tokenizer, BATCH, SEQ, PREDICTIONS, token_cache=tempfile.mkdtemp()
        ),
        "previous": lambda: previous_dynamic_masking(files, tokenizer),
        "keras_hub": lambda: keras_hub_masking(files, tokenizer),
        "records": lambda: pretraining_dataset(records, BATCH, SEQ, PREDICTIONS),
        "per_record": lambda: per_record_reader(records),
    }[peer]()
    if dataset is None:
        return None
    iterator = iter(dataset)
    next(iterator)
    first = watch.seconds
    for _ in range(warmup):
        next(iterator)
    _, seconds = timed(lambda: [next(iterator) for _ in range(batches)])
    return {"rate": batches * BATCH / seconds, "first": first}


def measure_peer(job):
    global SEQ, PREDICTIONS  # the datasets read them
    SEQ, PREDICTIONS = job["seq_length"], job["predictions"]
    arguments = (job["name"], job["files"], job["vocab"], job["records"], job["warmup"], job["batches"])
    return {"result": measure(*arguments)}


def print_table(results, report):
    """The table of {(peer, cores): [each round's measure]}; their rates go into `report`."""

    def rate(peer, cores):
        runs = results[peer, cores]
        return statistics.median(run["rate"] for run in runs) if None not in runs else None

    previous, records = rate("previous", 1), rate("records", 1)
    print(
        "\n| data | instances/s, 1 core | 2 cores | 2 cores vs 1 | 1 core vs TFRecord reader "
        "| 1 core vs previous generator | first batch (1 core) |"
    )
    print("|---|---|---|---|---|---|---|")
    for (peer, cores), runs in results.items():
        if None not in runs:  # None: not available
            report.add(
                f"{peer}, {cores} cores", "instances/s", [run["rate"] for run in runs], first_batch_s=runs[0]["first"]
            )
    for peer, name in PEERS.items():
        one, two = rate(peer, 1), rate(peer, 2)
        if one is None:
            print(f"| {name} | not available | | | | | |")
            continue
        first = statistics.median(run["first"] for run in results[peer, 1])
        print(
            f"| {name} | {one:,.0f} | {two:,.0f} | {two / one:.2f}x | {one / records:.2f}x | {one / previous:.1f}x "
            f"| {first:.1f} s |"
        )


def main(argv=None):
    global SEQ, PREDICTIONS  # make_records and the table read them
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(SHARED / "data" / "pretraining" / "gutenberg"))
    parser.add_argument("--vocab", default=str(SHARED / "data" / "vocab" / "vocab.txt"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--batches", type=int, default=400, help="batches of 256 timed per round (400: ~10 epochs of Gutenberg)"
    )
    parser.add_argument("--warmup", type=int, default=40, help="batches read before timing")
    parser.add_argument("--quick", action="store_true", help="1 round of 200 batches")
    parser.add_argument("--seq-length", type=int, default=SEQ)
    parser.add_argument("--predictions", type=int, default=PREDICTIONS, help="max predictions per sequence")
    add_json_argument(parser)
    add_peer_argument(parser)
    args = parser.parse_args(argv)
    if args.peer:
        return answer_peer({"masking": measure_peer})
    SEQ, PREDICTIONS = args.seq_length, args.predictions
    if args.quick:
        args.rounds, args.batches = 1, 200
    report = Report("bench_dynamic_masking", vars(args))
    files = sorted(str(path) for path in Path(args.corpus).glob("*.txt"))
    job = {"peer": "masking", "files": files, "vocab": args.vocab, "warmup": args.warmup, "batches": args.batches}
    job.update(seq_length=SEQ, predictions=PREDICTIONS, records=make_records(files, args.vocab, tempfile.mkdtemp()))
    results = {(peer, cores): [] for peer in PEERS for cores in (1, 2)}
    for _ in range(args.rounds):
        for peer, cores in results:
            answer = run_peer(sys.executable, __file__, {**job, "name": peer}, cores=cores)
            results[peer, cores].append(answer["result"])

    print(
        f"{machine_line(report.machine)}; {len(files)} files; batch {BATCH} x seq {SEQ}, {PREDICTIONS} predictions; "
        f"{args.rounds} round(s) of {args.batches} batches after {args.warmup}"
    )

    print_table(results, report)
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())
