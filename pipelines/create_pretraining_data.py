"""`bert-keras create-pretraining-data`: text -> TFRecords in the original BERT layout."""


def register(subparsers):
    parser = subparsers.add_parser(
        "create-pretraining-data",
        help="make masked-LM + next-sentence TFRecords from text (original recipe and format)",
        description="Text files (one sentence per line with blank lines between documents, or "
        "prose paragraphs) -> TFRecords with the features of google-research/bert's "
        "create_pretraining_data.py. Defaults are the original tool's.",
    )
    parser.add_argument("--input", nargs="+", required=True, help="text files or glob patterns")
    parser.add_argument("--output", required=True, help="output TFRecord file (or shard prefix)")
    parser.add_argument("--num-shards", type=int, default=1, help="write OUTPUT-0000i-of-N shards")
    parser.add_argument("--vocab", required=True, help="vocab.txt")
    parser.add_argument("--cased", action="store_true", help="do not lower-case (cased vocab)")
    parser.add_argument("--format", choices=("auto", "lines", "prose"), default="auto")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--max-predictions-per-seq", type=int, default=20)
    parser.add_argument("--masked-lm-prob", type=float, default=0.15)
    parser.add_argument("--short-seq-prob", type=float, default=0.1)
    parser.add_argument("--dupe-factor", type=int, default=10)
    parser.add_argument("--whole-word-mask", action="store_true")
    parser.add_argument("--seed", type=int, default=12345)
    parser.set_defaults(func=run)


def run(args):
    from bert_keras import BertTokenizer
    from bert_keras import pretraining_data as data

    if args.num_shards < 1:
        raise ValueError(f"--num-shards must be >= 1, got {args.num_shards}")
    tokenizer = BertTokenizer(args.vocab, lower_case=not args.cased)
    outputs = data.shard_names(args.output, args.num_shards)
    count = data.create_pretraining_data(
        data.expand_files(args.input),
        outputs,
        tokenizer,
        max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq,
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        dupe_factor=args.dupe_factor,
        whole_word_mask=args.whole_word_mask,
        random_seed=args.seed,
        format=args.format,
    )
    print(f"wrote {count} instances to {', '.join(outputs)}")
