"""`bert-keras convert`: move encoder weights between Keras, Hugging Face and TF1 formats."""

from pipelines.arguments import CheckpointPath

FORMATS = ("keras", "hf", "tf1")


def register(subparsers):
    parser = subparsers.add_parser(
        "convert",
        help="convert a BERT checkpoint between .keras, Hugging Face and original TF1 formats",
        description="Convert a BERT encoder checkpoint. Pre-training heads are dropped.",
    )
    parser.add_argument("--from", dest="source_format", choices=FORMATS, help="default: detected")
    parser.add_argument(
        "source", type=CheckpointPath, help="source checkpoint: .keras file, HF folder, TF1 dir or prefix"
    )
    parser.add_argument("--to", dest="target_format", choices=FORMATS, required=True)
    parser.add_argument("target", help="output: .keras file or folder")
    parser.set_defaults(func=run)


def run(args):
    from bert_keras.models.encoder import BertEncoder
    from bert_keras.models.saving import save_checkpoint

    if args.target_format == "keras" and not args.target.endswith(".keras"):
        raise ValueError(f"a Keras target must end in .keras, got {args.target}")
    encoder = BertEncoder.from_checkpoint(args.source, format=args.source_format)
    save_checkpoint(encoder, args.target, args.target_format)
    config = encoder.config
    print(
        f"wrote {args.target_format} checkpoint to {args.target}: "
        f"L{config.num_hidden_layers}/H{config.hidden_size}/A{config.num_attention_heads}, "
        f"{encoder.count_params():,} parameters"
    )
