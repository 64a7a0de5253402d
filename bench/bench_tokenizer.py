"""Tokenization throughput: bert-keras (exact, tokenize + pack) against peers.

Runs every tokenizer on the same lines of real text (default: the Gutenberg
books in ../shared/data/pretraining/gutenberg), interleaving repetitions so
that machine noise hits all of them alike, and prints median MB/s and
sentences/s with the ratio to tf.text's FastBertTokenizer. Peers that are not
installed are reported as such.

    python bench/bench_tokenizer.py [--repeats 5] [--batch-size 1024] [--max-mb 4]
"""

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.text.preprocessor import BertPreprocessor
from bert_keras.text.tokenizer import BertTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.measure import Report, add_json_argument, interleaved, machine_line

SHARED = Path(__file__).resolve().parents[2] / "shared"


def read_lines(corpus, max_mb):
    lines, size = [], 0
    for path in sorted(Path(corpus).glob("*.txt")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                lines.append(line)
                size += len(line.encode("utf-8"))
                if size >= max_mb * 1e6:
                    return lines
    return lines


def tf_runner(fn, batches):
    fn = tf.function(fn, input_signature=[tf.TensorSpec([None], tf.string)])

    def run():
        for batch in batches:
            result = fn(batch)
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)

    return run


def make_runners(vocab_path, lines, batch_size, seq_length):
    vocabulary = [line.strip() for line in open(vocab_path, encoding="utf-8")]
    batches = [tf.constant(lines[i : i + batch_size]) for i in range(0, len(lines), batch_size)]
    runners = {}
    tokenizer = BertTokenizer(vocabulary)
    preprocessor = BertPreprocessor(tokenizer, seq_length=seq_length)
    runners["bert-keras (exact + packed)"] = tf_runner(preprocessor, batches)
    runners["bert-keras (exact, tokenize only)"] = tf_runner(tokenizer, batches)
    runners["tf_text.FastBertTokenizer"] = tf_runner(
        tf_text.FastBertTokenizer(vocabulary, lower_case_nfd_strip_accents=True, token_out_type=tf.int32).tokenize,
        batches,
    )
    lookup = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(vocabulary, tf.range(len(vocabulary), dtype=tf.int64)), 1
    )
    runners["tf_text.BertTokenizer"] = tf_runner(
        tf_text.BertTokenizer(lookup, lower_case=True, token_out_type=tf.int64).tokenize, batches
    )
    try:
        import keras_hub

        runners["keras_hub BertTokenizer"] = tf_runner(
            keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True), batches
        )
    except ImportError:
        runners["keras_hub BertTokenizer"] = None
    try:
        from tokenizers import BertWordPieceTokenizer

        hf = BertWordPieceTokenizer(str(vocab_path), lowercase=True)
        text_batches = [lines[i : i + batch_size] for i in range(0, len(lines), batch_size)]

        def run_hf():
            for batch in text_batches:
                hf.encode_batch(batch, add_special_tokens=False)

        runners["HF tokenizers BertWordPiece (Rust)"] = run_hf
    except ImportError:
        runners["HF tokenizers BertWordPiece (Rust)"] = None
    return runners


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(SHARED / "data" / "pretraining" / "gutenberg"))
    parser.add_argument("--vocab", default=str(SHARED / "data" / "vocab" / "vocab.txt"))
    parser.add_argument("--max-mb", type=float, default=4.0)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    add_json_argument(parser)
    args = parser.parse_args(argv)
    report = Report("bench_tokenizer", vars(args))

    lines = read_lines(args.corpus, args.max_mb)
    megabytes = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    print(
        f"{len(lines)} lines, {megabytes:.2f} MB, batch {args.batch_size}, "
        f"{tf.config.threading.get_inter_op_parallelism_threads() or os.cpu_count()} threads; "
        f"{machine_line(report.machine)}"
    )
    runners = make_runners(args.vocab, lines, args.batch_size, args.seq_length)
    available = {name: run for name, run in runners.items() if run is not None}
    times = interleaved(available, args.repeats)  # the warm-up call traces
    seconds_of = {name: report.add(name, "s", samples)["median"] for name, samples in times.items()}
    reference = seconds_of["tf_text.FastBertTokenizer"]
    print("\n| tokenizer | MB/s | sentences/s | vs FastBertTokenizer |\n|---|---|---|---|")
    for name, run in runners.items():
        if run is None:
            print(f"| {name} | not installed | | |")
            continue
        seconds = seconds_of[name]
        print(f"| {name} | {megabytes / seconds:.1f} | {len(lines) / seconds:,.0f} | {reference / seconds:.2f}x |")
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())
