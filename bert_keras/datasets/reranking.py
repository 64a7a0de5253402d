"""Re-ranking for a `BertReranker` (a cross-encoder): pair files, hard negatives mined
with an embedder, and the ranking metrics of a reranker ordering each query's
candidates (recall@1/5/10, MRR@10, nDCG@10 of `retrieval.retrieval_metrics`).

`RerankingData` is the `TaskData` that `bert-keras finetune reranker` trains and scores with.
"""

import random

import numpy as np

from bert_keras.datasets.retrieval import retrieval_metrics, top_k
from bert_keras.datasets.task_data import TaskData
from bert_keras.datasets.tsv import read_rows
from bert_keras.training.finetuning import length_grouped_batches

LABELLED, TRIPLETS = ("query", "document", "label"), ("anchor", "positive", "negative")


def read_reranking_pairs(path):
    """(kind, columns {name: [texts]}, labels or None) of a pairs TSV whose header names
    them: kind "labelled" (query, document, label) or "triplets" (anchor, positive[, negative])."""
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


def mine_hard_negatives(embedder, anchors, positives, count, documents=None, batch_size=64):
    """`count` hard negatives per row: the documents (`documents`, default the distinct
    `positives`) that `embedder` (a `BertTextEmbedder`) ranks highest for the anchor,
    skipping every positive of that anchor. Returns a list of `count` texts per row."""
    documents = list(dict.fromkeys(documents if documents is not None else positives))
    wanted = {}
    for anchor, positive in zip(anchors, positives):
        wanted.setdefault(anchor, set()).add(positive)
    most = max(len(texts) for texts in wanted.values())
    if len(documents) < count + most:
        raise ValueError(f"{len(documents)} documents are too few to mine {count} negatives per query")
    queries = list(wanted)
    _, indices = top_k(
        embedder.encode_queries(queries, batch_size=batch_size),
        embedder.encode_documents(documents, batch_size=batch_size),
        k=count + most,
    )
    mined = {
        query: [documents[i] for i in row if documents[i] not in wanted[query]][:count]
        for query, row in zip(queries, indices)
    }
    return [mined[anchor] for anchor in anchors]


def ranking_metrics(reranker, queries, candidates, relevant, batch_size=64):
    """recall@1/5/10, MRR@10 and nDCG@10 (`retrieval.retrieval_metrics`) of `reranker`
    ordering each query's `candidates` (a list of texts per query); `relevant` holds the
    indices of the relevant ones in each list."""
    pairs = [(query, text) for query, texts in zip(queries, candidates) for text in texts]
    scores = reranker.predict(pairs, batch_size=batch_size, verbose=0) if pairs else np.zeros(0)
    orders, start = [], 0
    for texts in candidates:
        orders.append(np.argsort(-scores[start : start + len(texts)], kind="stable"))
        start += len(texts)
    return retrieval_metrics(orders, relevant)


class RerankingData(TaskData):
    """Pair files for a reranker: `query document label` pairs (binary cross-entropy) or
    `anchor positive [negative]` triplets (list-wise; `mine_negatives` adds hard negatives
    where the file has none), the train file's first `max_examples` rows. The dev file is
    scored as re-ranking of each query's candidates (`choose_dev_candidates`), kept by nDCG@10."""

    labels = None
    main_metric = "ndcg@10"

    def __init__(self, train_path, dev_path, max_examples=None):
        self.kind, columns, labels = read_reranking_pairs(train_path)
        dev_kind, self.dev_columns, self.dev_labels = read_reranking_pairs(dev_path)
        if dev_kind != self.kind:
            raise ValueError(f"{train_path} holds {self.kind} pairs but {dev_path} holds {dev_kind} pairs")
        self.train_size = min(len(next(iter(columns.values()))), max_examples or 10**12)
        self.columns = {name: texts[: self.train_size] for name, texts in columns.items()}
        self.train_labels = labels[: self.train_size] if labels else None
        self.dev = None

    def mine_negatives(self, embedder, count):
        """Adds `count` hard negatives per triplet that `embedder` mines among the training
        positives, where the file has no negative column. Returns whether it mined."""
        if self.kind != "triplets" or "negative" in self.columns:
            return False
        self.columns["negative"] = mine_hard_negatives(
            embedder, self.columns["anchor"], self.columns["positive"], count
        )
        return True

    def choose_dev_candidates(self, embedder, count):
        """The dev queries' candidates (`dev_candidates`)."""
        self.dev = dev_candidates(self.kind, self.dev_columns, self.dev_labels, embedder, count)

    @property
    def dev_size(self):
        return len(self.dev[0])

    def train_batches(self, batch_size, seed):
        texts = tuple(_object_array(column) for column in self.columns.values())
        # Batches group rows by their longest text (a document, mostly), which sets the padded length.
        lengths = np.max(
            [np.char.str_len(column.astype(str)).reshape(self.train_size, -1).max(axis=1) for column in texts], axis=0
        )
        data = (texts,) if self.train_labels is None else (texts, np.asarray(self.train_labels, "float32"))
        return length_grouped_batches(data, lengths, batch_size, shuffle=True, seed=seed)

    def evaluate(self, model, batch_size):
        return ranking_metrics(model, *self.dev, batch_size)


def _object_array(texts):
    """An object array of strings `[N]`, or `[N, n]` for a list of texts per row."""
    array = np.empty((len(texts),) + np.shape(texts[0]), dtype=object)
    array[:] = texts if np.ndim(texts[0]) == 0 else [list(row) for row in texts]
    return array
