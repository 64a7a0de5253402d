"""`bert-keras vocab`: learn a WordPiece vocab.txt from text files."""

import sys
import time

from bert_keras_cli.arguments import InputPath, add_runner_argument, beam_options
from bert_keras_cli.startup import quiet_start_up


def register(subparsers):
    parser = subparsers.add_parser(
        "vocab",
        help="learn a WordPiece vocab.txt from text files",
        description="Learns a WordPiece vocabulary on the same normalisation as BertTokenizer: "
        "tf.text's learner's vocabulary from the same counts, faster (docs/vocabulary.md). "
        "Layout: [PAD], [unused0..K-1], [UNK], [CLS], [SEP], [MASK], learned pieces. "
        "Words are counted in parts of the corpus, by --workers processes or on a Beam --runner "
        "(the same counts either way); Apache Beam pipeline options follow --runner RUNNER, the last flag.",
    )
    parser.add_argument(
        "--corpus", nargs="+", required=True, type=InputPath, metavar="FILE", help="UTF-8 text files, one line a text"
    )
    parser.add_argument("--size", type=int, required=True, help="vocabulary size, reserved tokens included")
    parser.add_argument("--out", required=True, help="output vocab.txt")
    parser.add_argument(
        "--lower-case",
        action="store_true",
        default=True,
        help="uncased vocabulary (default): lower-case, strip accents",
    )
    parser.add_argument("--no-lower-case", dest="lower_case", action="store_false", help="cased vocabulary")
    parser.add_argument("--unused", type=int, default=0, metavar="K", help="[unusedK] slots to reserve (default 0)")
    parser.add_argument("--workers", type=int, default=1, help="processes counting words (local runner)")
    parser.add_argument(
        "--max-distinct-words",
        type=int,
        metavar="N",
        help="bound the memory of the local count: keep at most N distinct words, dropping the rarest "
        "(lossy counting; every word seen more than the floor it reports is kept, its count at most that "
        "floor short; docs/vocabulary.md). Default: exact counts",
    )
    add_runner_argument(parser, "; a Beam runner writes its counts to OUT.counts-* and removes them", True)
    # Counting and learning are plain Python and numpy: the command starts without TensorFlow.
    parser.set_defaults(func=run, tensorflow=False)


def run(args):
    from bert_keras.text.vocab import build_vocabulary, write_vocabulary

    pipeline_options = _checked_pipeline_options(args)
    started = time.time()
    counts = _count_locally(args) if pipeline_options is None else _count_on_beam(args, pipeline_options)
    print(
        f"counted {sum(counts.values())} words, {len(counts)} distinct, in {time.time() - started:.1f}s",
        file=sys.stderr,
    )
    print(f"learning {args.size} pieces from {len(counts)} distinct words ...", file=sys.stderr, flush=True)
    learning = time.time()
    vocabulary = build_vocabulary(counts, args.size, num_unused=args.unused)
    print(f"learned in {time.time() - learning:.1f}s", file=sys.stderr)
    write_vocabulary(vocabulary, args.out)
    print(f"wrote {len(vocabulary)} tokens to {args.out} in {time.time() - started:.1f}s", file=sys.stderr)


def _checked_pipeline_options(args):
    """The Beam pipeline options of the run (None: counted locally), once the flags agree."""
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    if args.max_distinct_words is not None and args.max_distinct_words < 1:
        raise ValueError(f"--max-distinct-words must be >= 1, got {args.max_distinct_words}")
    pipeline_options = beam_options(args)
    if pipeline_options is not None and (args.workers > 1 or args.max_distinct_words is not None):
        raise ValueError("--workers and --max-distinct-words are for the local count; a Beam --runner scales its own")
    return pipeline_options


def _count_locally(args):
    """The corpus' word counts, counted by `--workers` processes, with progress on stderr."""
    from bert_keras.text.vocab import count_words

    # bert_keras.training.progress.is_terminal, without its Keras import
    terminal, last_line = hasattr(sys.stderr, "isatty") and sys.stderr.isatty(), [0.0]

    def progress(done, total, words):
        # One line redrawn on a terminal; elsewhere (a file, a pipe) a line every 30 s.
        text = f"counting words: {done / 2**20:.1f} of {total / 2**20:.1f} MiB, {words} distinct words"
        if terminal:
            print("\r" + text, end="", file=sys.stderr, flush=True)
        elif time.time() - last_line[0] >= 30 or done >= total:
            last_line[0] = time.time()
            print(text, file=sys.stderr, flush=True)

    counts = count_words(args.corpus, args.lower_case, progress, args.workers, max_words=args.max_distinct_words)
    if terminal:
        print(file=sys.stderr)
    if counts.floor:
        print(
            f"pruned to {args.max_distinct_words} distinct words: words seen more than {counts.floor} times "
            f"are all counted, each at most {counts.floor} short; rarer ones may be missing",
            file=sys.stderr,
        )
    return counts


def _count_on_beam(args, pipeline_options):
    with quiet_start_up():  # Beam's file systems import TensorFlow
        from bert_keras.text import vocab_beam

    print(f"counting words on {args.runner[0]} ...", file=sys.stderr, flush=True)
    return vocab_beam.count_words(args.corpus, f"{args.out}.counts", pipeline_options, lower_case=args.lower_case)
