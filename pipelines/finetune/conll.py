"""`bert-keras finetune conll`: CoNLL-2003 NER with a `BertTokenClassifier`.

Reading, IOB1 -> IOB2 and conlleval are `bert_keras.datasets.conll`; this command trains,
scores each epoch and writes the best epoch's `predictions.txt` (conlleval's input).
With `--feature-based LAYERS` the encoder stays frozen and the paper's feature-based
task model (a `BertFeatureTagger`: the layers combined, a two-layer BiLSTM, the tag
layer) is trained on features computed once (`bert_keras.recipes.feature_based`).

Example: `bert-keras finetune conll --data-dir ../shared/data/conll2003 --output-dir runs/ner`;
`... --feature-based -1,-2,-3,-4 --combine concat` for the feature-based model.
"""

from bert_keras_cli.arguments import InputPath, accept_layer_lists, add_window_arguments, report_truncation

HELP = "CoNLL-2003 named entity recognition"
# --learning-rate: 5e-5 fine-tuning, 1e-3 for --feature-based (the LSTM's Adam).
DEFAULTS = dict(learning_rate=None, epochs=3, batch_size=32, max_seq_length=128)


def add_arguments(parser):
    parser.add_argument(
        "--data-dir", required=True, type=InputPath, help="folder with eng.train and eng.testa (eng.testb)"
    )
    parser.add_argument("--eval-split", default="testa", help="eng.<split> to evaluate on (default testa)")
    add_window_arguments(parser, pooling=False, trained=True)
    parser.add_argument(
        "--document-context",
        action="store_true",
        help="pack each sentence with the words around it in its document (up to --max-seq-length pieces), "
        "as the paper's CoNLL-2003 results; only the sentence's own words are labelled and scored",
    )
    parser.add_argument(
        "--feature-based",
        metavar="LAYERS",
        type=lambda text: [part.strip() for part in text.split(",") if part.strip()],
        help="keep the encoder frozen and train a BiLSTM tagger on these layers' features, computed once: "
        "comma-separated indices, -1 the last layer, 0 the first, 'embeddings' the embedding output "
        "(e.g. -1,-2,-3,-4)",
    )
    accept_layer_lists(parser)
    parser.add_argument(
        "--combine",
        choices=("concat", "sum", "weighted"),
        default="concat",
        help="--feature-based: concatenate the layers, sum them, or a learnt softmax-weighted sum (ELMo's)",
    )
    parser.add_argument("--lstm-units", type=int, default=768, help="--feature-based: units a direction")
    parser.add_argument("--lstm-layers", type=int, default=2, help="--feature-based: BiLSTM layers")


def run(args):
    from bert_keras.datasets.conll import ConllData
    from bert_keras.tasks.feature_tagger import BertFeatureTagger
    from bert_keras.tasks.token_classifier import BertTokenClassifier
    from bert_keras_cli.finetune.common import build_head, train, write_best_metrics

    feature_based = args.feature_based is not None
    if args.learning_rate is None:
        args.learning_rate = 1e-3 if feature_based else 5e-5
    data = ConllData(args.data_dir, args.eval_split, args.max_examples, args.document_context, args.max_seq_length)
    print(f"CoNLL-2003: {data.train_size} training sentences, {data.dev_size} in eng.{args.eval_split}")
    if feature_based:
        strategy, model = build_head(args, BertFeatureTagger, **data.head_arguments(), **feature_arguments(args))
    else:
        strategy, model = build_head(
            args,
            BertTokenClassifier,
            **data.head_arguments(),
            doc_stride=args.doc_stride,
            window_micro_batch=args.window_micro_batch,
        )
    data.prepare(model)
    if args.document_context:
        print(f"document context: {sum(len(c.words) for c in data.train_contexts)} words in training examples")
    report_truncation(args, model.preprocessor, data.training_texts(), "training sentences")
    best = train_feature_based(args, model, data) if feature_based else train(args, strategy, model, data)
    write_best_metrics(args, best)
    return 0


def feature_arguments(args):
    """The `BertFeatureTagger`'s arguments of --feature-based and its flags, checked
    against the fine-tuning flags it does not take."""
    unused = {
        "--doc-stride": args.doc_stride is not None,
        "--max-train-minutes": args.max_train_minutes is not None,
        "--strategy": args.strategy != "default",
        "a fractional --epochs": args.epochs != int(args.epochs),
        "--bias-correction": args.bias_correction,
        "--reinit-layers": args.reinit_layers != 0,
    }
    for flag, given in unused.items():
        if given:
            raise ValueError(f"--feature-based trains the BiLSTM for whole epochs on one device: {flag} is not for it")
    return dict(
        layers=args.feature_based, combine=args.combine, lstm_units=args.lstm_units, lstm_layers=args.lstm_layers
    )


def train_feature_based(args, model, data):
    """`bert_keras.recipes.feature_based.train_feature_tagger` with the command's flags."""
    from bert_keras.recipes.feature_based import train_feature_tagger

    print(f"feature-based: layers {model.layer_names} ({args.combine}), BiLSTM {args.lstm_layers}x{args.lstm_units}")
    run = train_feature_tagger(
        model,
        data,
        output_dir=args.output_dir,
        epochs=int(args.epochs),
        max_train_steps=args.max_train_steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        eval_batch_size=args.eval_batch_size,
        seed=args.seed,
        backup_steps=args.backup_steps,
        verbose=args.verbose,
    )
    return run.best
