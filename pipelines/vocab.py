"""`bert-keras vocab`: learn a WordPiece vocab.txt from text files."""

import sys
import time


def register(subparsers):
    parser = subparsers.add_parser(
        "vocab",
        help="learn a WordPiece vocab.txt from text files",
        description="Learns a WordPiece vocabulary on the same normalisation as BertTokenizer. "
        "Layout: [PAD], [unused0..K-1], [UNK], [CLS], [SEP], [MASK], learned pieces.",
    )
    parser.add_argument("--corpus", nargs="+", required=True, metavar="FILE", help="UTF-8 text files, one line a text")
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
    parser.set_defaults(func=run)


def run(args):
    import tensorflow as tf

    from bert_keras.text.vocab import build_vocabulary, count_words, write_vocabulary

    for path in args.corpus:
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"corpus file not found: {path}")
    started = time.time()

    def progress(lines, words):
        print(f"\rcounting words: {lines} lines, {words} distinct words", end="", file=sys.stderr, flush=True)

    counts = count_words(args.corpus, lower_case=args.lower_case, progress=progress)
    print(file=sys.stderr)
    print(f"learning {args.size} pieces from {len(counts)} distinct words ...", file=sys.stderr, flush=True)
    vocabulary = build_vocabulary(counts, args.size, num_unused=args.unused)
    write_vocabulary(vocabulary, args.out)
    print(f"wrote {len(vocabulary)} tokens to {args.out} in {time.time() - started:.1f}s", file=sys.stderr)
