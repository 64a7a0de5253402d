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

import json
import random
from pathlib import Path

HELP = "a cross-encoder reranker from (query, document, label) or (anchor, positive[, negative]) pairs"
DEFAULTS = dict(learning_rate=2e-5, epochs=1, batch_size=16, max_seq_length=None)
LABELLED, TRIPLETS = ("query", "document", "label"), ("anchor", "positive", "negative")


def add_arguments(parser):
    parser.add_argument(
        "--train", required=True, help="training TSV (header: query document label, or anchor positive [negative])"
    )
    parser.add_argument("--dev", required=True, help="evaluation TSV, same columns")
    parser.add_argument("--mine-with", help="embedder that mines hard negatives (default: --init)")
    parser.add_argument("--negatives", type=int, default=3, help="hard negatives mined per anchor (default 3)")
    parser.add_argument(
        "--dev-candidates", type=int, default=10, help="dev documents the embedder retrieves per anchor (default 10)"
    )


def read_pairs(path):
    """(kind, columns {name: [texts]}, labels or None) of a pairs TSV whose header names
    them: kind "labelled" (query, document, label) or "triplets" (anchor, positive[, negative])."""
    from bert_keras.tasks.glue import read_rows

    rows = read_rows(path, header=False)
    if not rows:
        raise ValueError(f"{path}: empty file; need a header (query document label, or anchor positive [negative])")
    (_, header), rows = rows[0], rows[1:]
    names = TRIPLETS if "anchor" in header else LABELLED
    needed = names[:2] + (("label",) if names is LABELLED else ())
    missing = [name for name in needed if name not in header]
    if missing:
        raise ValueError(
            f"{path}: header {header} lacks column(s) {missing}; need query, document, label, "
            "or anchor, positive [, negative]"
        )
    if not rows:
        raise ValueError(f"{path}: no pairs below the header")
    columns = {name: [fields[header.index(name)] for _, fields in rows] for name in names if name in header}
    labels = None
    if names is LABELLED:
        labels = []
        for number, fields in rows:
            try:
                labels.append(float(fields[header.index("label")]))
            except ValueError:
                raise ValueError(f"{path}:{number}: label {fields[header.index('label')]!r} is not a number") from None
            if not 0.0 <= labels[-1] <= 1.0:
                raise ValueError(f"{path}:{number}: label {labels[-1]} is outside 0..1")
        del columns["label"]
    return ("triplets" if names is TRIPLETS else "labelled"), columns, labels


def dev_candidates(kind, columns, labels, embedder, count):
    """(queries, candidate texts per query, indices of the relevant ones) of the dev file."""
    queries, candidates, relevant = {}, {}, {}
    if kind == "labelled":
        for query, document, label in zip(columns["query"], columns["document"], labels):
            texts = candidates.setdefault(query, [])
            if label >= 0.5:
                relevant.setdefault(query, set()).add(len(texts))
            texts.append(document)
    else:
        from bert_keras.tasks.reranker import mine_hard_negatives

        documents = columns["positive"] + columns.get("negative", [])
        mined = mine_hard_negatives(embedder, columns["anchor"], columns["positive"], count, documents)
        for row, (anchor, positive) in enumerate(zip(columns["anchor"], columns["positive"])):
            texts = candidates.setdefault(anchor, [])
            relevant.setdefault(anchor, set()).add(len(texts))
            extra = [columns["negative"][row]] if "negative" in columns else []
            texts += [positive] + [text for text in extra + mined[row] if text not in texts]
    queries = [query for query in candidates if relevant.get(query)]
    # A fixed shuffle of each list: in file order the relevant documents come first, so a
    # reranker that scores every pair alike (ties keep their order) would look perfect.
    orders = [random.Random(query).sample(range(len(candidates[query])), len(candidates[query])) for query in queries]
    return (
        queries,
        [[candidates[query][i] for i in order] for query, order in zip(queries, orders)],
        [{order.index(i) for i in relevant[query]} for query, order in zip(queries, orders)],
    )


def run(args):
    import numpy as np

    from bert_keras.tasks.reranker import BertReranker, mine_hard_negatives, ranking_metrics
    from bert_keras.tasks.text_embedder import BertTextEmbedder
    from bert_keras.training.finetuning import length_grouped_batches
    from pipelines.arguments import checkpoint_source
    from pipelines.finetune import build_head, train

    kind, columns, labels = read_pairs(args.train)
    dev_kind, dev_columns, dev_labels = read_pairs(args.dev)
    if dev_kind != kind:
        raise ValueError(f"{args.train} holds {kind} pairs but {args.dev} holds {dev_kind} pairs")
    count = min(len(next(iter(columns.values()))), args.max_examples or 10**12)
    columns = {name: texts[:count] for name, texts in columns.items()}
    labels = labels[:count] if labels else None
    embedder = None
    if kind == "triplets":
        embedder = BertTextEmbedder.from_checkpoint(checkpoint_source(args.mine_with or args.init))
        if "negative" not in columns:
            mined = mine_hard_negatives(embedder, columns["anchor"], columns["positive"], args.negatives)
            columns["negative"] = mined
            print(f"mined {args.negatives} hard negatives for each of {count} anchors")
    dev = dev_candidates(dev_kind, dev_columns, dev_labels, embedder, args.dev_candidates)
    strategy, model = build_head(args, BertReranker)
    print(f"{count} training {kind}; {len(dev[0])} dev queries, {sum(map(len, dev[1]))} candidates to re-rank")

    def as_array(texts):
        array = np.empty((len(texts),) + np.shape(texts[0]), dtype=object)
        array[:] = texts if np.ndim(texts[0]) == 0 else [list(row) for row in texts]
        return array

    texts = tuple(as_array(column) for column in columns.values())
    # Batches group rows by their longest text (a document, mostly), which sets the padded length.
    lengths = np.max([np.char.str_len(column.astype(str)).reshape(count, -1).max(axis=1) for column in texts], axis=0)
    data = (texts,) if labels is None else (texts, np.asarray(labels, "float32"))
    batches = length_grouped_batches(data, lengths, args.batch_size, shuffle=True, seed=args.seed)
    best = train(
        model,
        args,
        batches,
        count,
        lambda model: ranking_metrics(model, *dev, args.eval_batch_size),
        "ndcg@10",
        strategy,
    )
    output_dir = Path(args.output_dir)
    model.save_checkpoint(output_dir / "cross-encoder")
    (output_dir / "best_metrics.json").write_text(json.dumps(best, indent=2) + "\n")
    print(f"CrossEncoder folder: {output_dir / 'cross-encoder'}")
    return 0
