"""`bert-keras create-pretraining-data`: text -> TFRecords in the original BERT layout."""

from bert_keras_cli.arguments import InputPath, add_runner_argument, beam_options


def register(subparsers):
    parser = subparsers.add_parser(
        "create-pretraining-data",
        help="make masked-LM + next-sentence TFRecords from text (original recipe and format)",
        description="Text files (one sentence per line with blank lines between documents, or "
        "prose paragraphs) -> TFRecords with the features of google-research/bert's "
        "create_pretraining_data.py. Defaults are the original tool's. The input is cut into "
        "shards (the documents starting in each --shard-size MiB of input), each made on its own "
        "(next-sentence random segments come from the same shard) into its own file, so a rerun "
        "skips finished shards and the output does not depend on --workers or the runner. "
        "Apache Beam pipeline options follow --runner RUNNER, the last flag.",
    )
    parser.add_argument("--input", nargs="+", required=True, type=InputPath, help="text files or glob patterns")
    parser.add_argument("--output", required=True, help="output TFRecord file, or the prefix of OUTPUT-0000k-of-0000n")
    parser.add_argument("--vocab", required=True, type=InputPath, help="vocab.txt")
    parser.add_argument("--cased", action="store_true", help="do not lower-case (cased vocab)")
    parser.add_argument("--format", choices=("auto", "lines", "prose"), default="auto")
    parser.add_argument("--shard-size", type=float, default=2.0, help="MiB of input text per shard")
    parser.add_argument("--num-shards", type=int, help="cut the input into this many equal shards instead")
    parser.add_argument("--workers", type=int, default=1, help="processes making shards (local runner)")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--max-predictions-per-seq", type=int, default=20)
    parser.add_argument("--masked-lm-prob", type=float, default=0.15)
    parser.add_argument("--short-seq-prob", type=float, default=0.1)
    parser.add_argument("--dupe-factor", type=int, default=10)
    parser.add_argument("--whole-word-mask", action="store_true")
    parser.add_argument("--seed", type=int, default=12345, help="shard k uses the original's --random_seed SEED+k")
    add_runner_argument(parser, options_after_dashes=True)
    parser.set_defaults(func=run)


def run(args):
    from bert_keras import BertTokenizer
    from bert_keras.data import pretraining_shards as shards
    from bert_keras.data.tfrecords import expand_files

    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    pipeline_options = beam_options(args)
    beam_runner = None
    if pipeline_options is not None:
        from bert_keras.data.pretraining_beam import runner

        beam_runner = runner(pipeline_options)
    tokenizer = BertTokenizer(args.vocab, lower_case=not args.cased)
    recipe = shards.Recipe(
        max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq,
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        dupe_factor=args.dupe_factor,
        whole_word_mask=args.whole_word_mask,
        random_seed=args.seed,
    )
    count = shards.create_pretraining_data(
        expand_files(args.input),
        args.output,
        tokenizer,
        recipe,
        format=args.format,
        shard_bytes=max(1, round(args.shard_size * 2**20)),
        num_shards=args.num_shards,
        workers=args.workers,
        beam_runner=beam_runner,
    )
    print(f"wrote {count} instances; manifest {shards.manifest_path(args.output)}")
