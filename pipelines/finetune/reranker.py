"""A cross-encoder reranker from query-document pairs: `bert-keras finetune reranker`.

The TSV header names the columns. `query document label` (label 0/1, or graded in
0..1) trains with binary cross-entropy on the pairs. `anchor positive [negative]`
trains list-wise: each anchor's positive must outscore its hard negatives (softmax
cross-entropy over them); without a `negative` column, `--negatives` hard negatives per
row are mined among the training positives with `--mine-with` (a sentence embedder;
default: the `--init` checkpoint used as one, mean pooling).

The dev file (same columns) is scored as re-ranking after every epoch: each dev query's
candidates (its documents; for anchor/positive files its positives, negatives and the
embedder's top `--dev-candidates` dev documents) are ordered by the reranker, giving
recall@1/5/10, MRR@10 and nDCG@10; the best model by nDCG@10 is kept as `best.keras`,
and written as a sentence-transformers CrossEncoder folder, `cross-encoder/`.

Example: `bert-keras finetune reranker --train pairs.tsv --dev dev.tsv --init CKPT --output-dir runs/rerank`.
"""

from pathlib import Path

from bert_keras_cli.arguments import CheckpointPath

HELP = "a cross-encoder reranker from (query, document, label) or (anchor, positive[, negative]) pairs"
DEFAULTS = dict(learning_rate=2e-5, epochs=1, batch_size=16, max_seq_length=None)


def add_arguments(parser):
    parser.add_argument(
        "--train", required=True, help="training TSV (header: query document label, or anchor positive [negative])"
    )
    parser.add_argument("--dev", required=True, help="evaluation TSV, same columns")
    parser.add_argument("--mine-with", type=CheckpointPath, help="embedder that mines hard negatives (default: --init)")
    parser.add_argument("--negatives", type=int, default=3, help="hard negatives mined per anchor (default 3)")
    parser.add_argument(
        "--dev-candidates", type=int, default=10, help="dev documents the embedder retrieves per anchor (default 10)"
    )


def run(args):
    from bert_keras.datasets.reranking import RerankingData
    from bert_keras.tasks.reranker import BertReranker
    from bert_keras.tasks.text_embedder import BertTextEmbedder
    from bert_keras_cli.arguments import checkpoint_source
    from bert_keras_cli.finetune.common import build_head, train, write_best_metrics

    data = RerankingData(args.train, args.dev, args.max_examples)
    embedder = None
    if data.kind == "triplets":
        embedder = BertTextEmbedder.from_checkpoint(checkpoint_source(args.mine_with or args.init))
        if data.mine_negatives(embedder, args.negatives):
            print(f"mined {args.negatives} hard negatives for each of {data.train_size} anchors")
    data.choose_dev_candidates(embedder, args.dev_candidates)
    strategy, model = build_head(args, BertReranker)
    print(
        f"{data.train_size} training {data.kind}; {data.dev_size} dev queries, "
        f"{sum(map(len, data.dev[1]))} candidates to re-rank"
    )
    best = train(args, strategy, model, data)
    output_dir = Path(args.output_dir)
    model.save_checkpoint(output_dir / "cross-encoder")
    write_best_metrics(args, best)
    print(f"CrossEncoder folder: {output_dir / 'cross-encoder'}")
    return 0
