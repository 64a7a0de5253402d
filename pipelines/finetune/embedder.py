"""Sentence embeddings from text pairs: `bert-keras finetune embedder`.

The TSV header names the columns. `anchor` and `positive` (and optionally `negative`, a
hard negative) train with in-batch negatives (MultipleNegativesRankingLoss, scale 20):
each anchor's positive must outscore every other text of the global batch, duplicates
excepted; the dev file is scored as retrieval (its anchors search its positives and
negatives: recall@1/5/10, MRR@10, nDCG@10, the best model kept by nDCG@10). `text_a`,
`text_b` and `score` train scored pairs with CoSENT and keep the best Spearman
correlation of cosine and score.

`--init` is a sentence-transformers folder (its pooling, normalisation and maximum
length are kept) or any BERT checkpoint (mean pooling, L2-normalised). Writes
`best.keras` and the same model as a sentence-transformers folder, `sentence-transformers/`.

Example: `bert-keras finetune embedder --train pairs.tsv --dev dev_pairs.tsv --output-dir runs/embed`.
"""

from pathlib import Path

from bert_keras_cli.arguments import InputPath, add_window_arguments, report_truncation

HELP = "sentence embeddings from (anchor, positive[, negative]) or scored (text_a, text_b, score) pairs"
DEFAULTS = dict(learning_rate=2e-5, epochs=1, batch_size=32, max_seq_length=None)


def add_arguments(parser):
    add_window_arguments(parser, pooling=False, trained=True)
    parser.add_argument(
        "--train", required=True, help="training TSV (header: anchor positive [negative], or text_a text_b score)"
    )
    parser.add_argument("--dev", required=True, type=InputPath, help="evaluation TSV, same columns")
    parser.add_argument(
        "--pooling",
        choices=("mean", "cls", "max", "mean_sqrt_len"),
        help="default: the sentence-transformers folder's, else mean",
    )
    parser.add_argument("--scale", type=float, default=20.0, help="cosine scale of the losses (1 / temperature)")
    parser.add_argument("--symmetric", action="store_true", help="also rank anchors for each positive")


def run(args):
    from bert_keras.datasets.retrieval import PairData
    from bert_keras.tasks.text_embedder import BertTextEmbedder
    from bert_keras_cli.arguments import checkpoint_source
    from bert_keras_cli.finetune.common import train, training_setup, write_best_metrics

    data = PairData(args.train, args.dev, args.max_examples, args.scale, args.symmetric)
    source = checkpoint_source(args.init)
    strategy, seq_length = training_setup(args)
    with strategy.scope():
        model = BertTextEmbedder.from_checkpoint(
            source,
            vocab=args.vocab,
            lower_case=False if args.cased else None,
            seq_length=seq_length,
            max_seq_length=args.max_seq_length,
            pooling=args.pooling,
            doc_stride=args.doc_stride,
            window_micro_batch=args.window_micro_batch,
        )
    print(
        f"encoder {source}: L{model.encoder.config.num_hidden_layers}/H{model.encoder.config.hidden_size}, "
        f"{model.pooling} pooling{', normalised' if model.normalize else ''}, "
        f"up to {model.preprocessor.packer.max_seq_length} tokens; {data.train_size} training pairs"
    )
    report_truncation(args, model.preprocessor, data.training_texts(), "training texts")
    best = train(args, strategy, model, data)
    output_dir = Path(args.output_dir)
    model.save_checkpoint(output_dir / "sentence-transformers")
    write_best_metrics(args, best)
    print(f"sentence-transformers folder: {output_dir / 'sentence-transformers'}")
    return 0
