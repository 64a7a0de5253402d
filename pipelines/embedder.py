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

import json
from pathlib import Path

from pipelines.arguments import InputPath, add_window_arguments, report_truncation

HELP = "sentence embeddings from (anchor, positive[, negative]) or scored (text_a, text_b, score) pairs"
DEFAULTS = dict(learning_rate=2e-5, epochs=1, batch_size=32, max_seq_length=None)
PAIRS, SCORED = ("anchor", "positive", "negative"), ("text_a", "text_b", "score")


def add_arguments(parser):
    add_window_arguments(parser, pooling=False)
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


def read_pairs(path):
    """(columns {name: [texts]}, scores or None) of a pairs TSV whose header names them."""
    from bert_keras.tasks.glue import read_rows

    rows = read_rows(path, header=False)
    if not rows:
        raise ValueError(f"{path}: empty file; need a header (anchor positive [negative], or text_a text_b score)")
    (_, header), rows = rows[0], rows[1:]
    names = PAIRS if "anchor" in header else SCORED
    wanted = [name for name in names if name in header]
    missing = [name for name in names[:2] + (("score",) if names is SCORED else ()) if name not in header]
    if missing:
        raise ValueError(
            f"{path}: header {header} lacks column(s) {missing}; need anchor, positive [, negative], "
            "or text_a, text_b, score"
        )
    columns = {name: [fields[header.index(name)] for _, fields in rows] for name in wanted}
    if not rows:
        raise ValueError(f"{path}: no pairs below the header")
    scores = None
    if names is SCORED:
        scores = []
        for number, fields in rows:
            try:
                scores.append(float(fields[header.index("score")]))
            except ValueError:
                raise ValueError(f"{path}:{number}: score {fields[header.index('score')]!r} is not a number") from None
        del columns["score"]
    return columns, scores


def run(args):
    import numpy as np

    from bert_keras.tasks import retrieval
    from bert_keras.tasks.text_embedder import BertTextEmbedder
    from bert_keras.training.contrastive import CoSENTLoss, MultipleNegativesRankingLoss
    from bert_keras.training.finetuning import length_grouped_batches
    from pipelines.arguments import checkpoint_source
    from pipelines.finetune import train, training_setup

    (columns, scores), dev = read_train_and_dev(args)
    count = len(next(iter(columns.values())))
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
        )
    print(
        f"encoder {source}: L{model.encoder.config.num_hidden_layers}/H{model.encoder.config.hidden_size}, "
        f"{model.pooling} pooling{', normalised' if model.normalize else ''}, "
        f"up to {model.preprocessor.packer.max_seq_length} tokens; {count} training pairs"
    )

    def evaluate(model):
        dev_columns, dev_scores = dev
        texts = list(dev_columns.values())
        if dev_scores is not None:
            a, b = (model.encode(column, args.eval_batch_size) for column in texts)
            return retrieval.similarity_correlations(a, b, dev_scores)
        queries, documents, relevant = retrieval.retrieval_set(*texts)
        return retrieval.evaluate_retrieval(
            model.encode_queries(queries, batch_size=args.eval_batch_size),
            model.encode_documents(documents, batch_size=args.eval_batch_size),
            relevant,
        )

    texts = tuple(np.array(column, dtype=object) for column in columns.values())
    report_truncation(args, model.preprocessor, np.concatenate(texts), "training texts")
    lengths = sum(np.char.str_len(np.array(column, dtype=str)) for column in columns.values())
    data = (texts,) if scores is None else (texts, np.asarray(scores, "float32"))
    batches = length_grouped_batches(data, lengths, args.batch_size, shuffle=True, seed=args.seed)
    loss = (
        CoSENTLoss(args.scale)
        if scores is not None
        else MultipleNegativesRankingLoss(args.scale, symmetric=args.symmetric)
    )
    best = train(
        model, args, batches, count, evaluate, "spearman" if scores is not None else "ndcg@10", strategy, loss=loss
    )
    output_dir = Path(args.output_dir)
    model.save_checkpoint(output_dir / "sentence-transformers")
    (output_dir / "best_metrics.json").write_text(json.dumps(best, indent=2) + "\n")
    print(f"sentence-transformers folder: {output_dir / 'sentence-transformers'}")
    return 0


def read_train_and_dev(args):
    """((columns, scores), (dev columns, dev scores)) of `--train` (its first
    `--max-examples` pairs) and `--dev`, which must have the same columns."""
    columns, scores = read_pairs(args.train)
    dev = read_pairs(args.dev)
    if list(dev[0]) != list(columns) or (dev[1] is None) != (scores is None):
        raise ValueError(
            f"{args.train} has columns {list(columns)}{' + score' if scores else ''} but {args.dev} "
            f"has {list(dev[0])}{' + score' if dev[1] else ''}"
        )
    if args.max_examples:
        columns = {name: texts[: args.max_examples] for name, texts in columns.items()}
        scores = scores[: args.max_examples] if scores else None
    return (columns, scores), dev
