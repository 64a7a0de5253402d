"""`bert-keras convert`: move a model between Keras, Hugging Face, TF1 and keras-hub formats, task heads
included."""

from bert_keras_cli.arguments import CheckpointPath

FORMATS = ("keras", "hf", "tf1", "keras-hub")


def register(subparsers):
    parser = subparsers.add_parser(
        "convert",
        help="convert a BERT checkpoint between .keras, Hugging Face, original TF1 and keras-hub formats",
        description="Convert a BERT checkpoint: an encoder, a pre-training model or a fine-tuned task model "
        "with its head and labels (Hugging Face BertFor* folders, run_classifier/run_squad TF1 checkpoints, "
        "task .keras files, keras-hub BertBackbone/BertTextClassifier presets). --to keras-hub writes a "
        "BertTextClassifier preset for a classifier, the BertBackbone alone for other models (needs keras-hub). "
        "A Hugging Face folder gets a model card (README.md) with the Hub's metadata, "
        "and the labels, dev metrics and command of the run that trained it (run.json beside a best.keras).",
    )
    parser.add_argument("--from", dest="source_format", choices=FORMATS, help="default: detected")
    parser.add_argument(
        "source",
        type=CheckpointPath,
        help="source checkpoint: .keras file, HF folder or Hub name (ORG/NAME[@REVISION]), TF1 dir or prefix, "
        "keras-hub preset folder or kaggle:// handle",
    )
    parser.add_argument("--to", dest="target_format", choices=FORMATS, required=True)
    parser.add_argument("target", help="output: .keras file or folder")
    parser.set_defaults(func=run)


def run(args):
    from bert_keras.tasks.checkpoint_models import load_model, save_model

    if args.target_format == "keras" and not args.target.endswith(".keras"):
        raise ValueError(f"a Keras target must end in .keras, got {args.target}")
    model = load_model(args.source, format=args.source_format)
    save_model(model, args.target, args.target_format, source=args.source)
    config = model.config
    labels = f", labels {model.labels}" if getattr(model, "labels", None) else ""
    print(
        f"wrote {args.target_format} {type(model).__name__} to {args.target}: "
        f"L{config.num_hidden_layers}/H{config.hidden_size}/A{config.num_attention_heads}, "
        f"{model.count_params():,} parameters{labels}"
    )
