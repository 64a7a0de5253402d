"""Scoring sentence embeddings: exact nearest-neighbour retrieval with the metrics of
sentence-transformers' InformationRetrievalEvaluator, and STS correlations.

Retrieval is exact (no index): cosine scores of a block of queries against a block of
documents, a running top-k merged block by block, so memory holds `query_block x
document_block` scores however large the collection (a million vectors included).
"""

import math

import numpy as np
import tensorflow as tf

from bert_keras.datasets.metrics import pearson, spearman
from bert_keras.datasets.task_data import TaskData
from bert_keras.datasets.tsv import read_rows
from bert_keras.training.contrastive import CoSENTLoss, MultipleNegativesRankingLoss
from bert_keras.training.finetuning import length_grouped_batches

RECALL_AT = (1, 5, 10)


@tf.function(reduce_retracing=True)
def _merge_top_k(best_scores, best_indices, queries, documents, offset, k):
    scores = tf.matmul(queries, documents, transpose_b=True)
    block_scores, block_indices = tf.math.top_k(scores, k=tf.minimum(k, tf.shape(documents)[0]))
    scores = tf.concat([best_scores, block_scores], axis=1)
    indices = tf.concat([best_indices, block_indices + offset], axis=1)
    scores, order = tf.math.top_k(scores, k=k)
    return scores, tf.gather(indices, order, batch_dims=1)


def _unit(vectors):
    vectors = np.asarray(vectors, np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def top_k(queries, documents, k=10, query_block=1024, document_block=65536):
    """Exact cosine top-k: (scores, indices) `[queries, k]`, best first (ties: the lower
    index). `documents` may be a memory-mapped array; it is read block by block."""
    queries = _unit(queries)
    k = min(int(k), len(documents))
    scores = np.empty((len(queries), k), np.float32)
    indices = np.empty((len(queries), k), np.int64)
    for q in range(0, len(queries), query_block):
        block = tf.constant(queries[q : q + query_block])
        best_scores = tf.fill([block.shape[0], k], -np.inf)
        best_indices = tf.fill([block.shape[0], k], -1)
        for d in range(0, len(documents), document_block):
            best_scores, best_indices = _merge_top_k(
                best_scores,
                best_indices,
                block,
                tf.constant(_unit(documents[d : d + document_block])),
                tf.constant(d, tf.int32),
                tf.constant(k, tf.int32),
            )
        scores[q : q + query_block], indices[q : q + query_block] = best_scores.numpy(), best_indices.numpy()
    return scores, indices


def retrieval_metrics(retrieved, relevant, recall_at=RECALL_AT, cutoff=10):
    """recall@k (the share of a query's relevant documents in its top k), MRR@cutoff and
    nDCG@cutoff (binary relevance), averaged over queries, from `retrieved` (indices
    `[queries, >= max k]`, best first) and `relevant` (one collection of document
    indices per query)."""
    totals = {f"recall@{k}": 0.0 for k in recall_at}
    totals.update({f"mrr@{cutoff}": 0.0, f"ndcg@{cutoff}": 0.0})
    if len(retrieved) != len(relevant):
        raise ValueError(f"{len(retrieved)} result lists for {len(relevant)} queries")
    for found, wanted in zip(retrieved, relevant):
        wanted = set(int(index) for index in wanted)
        if not wanted:
            raise ValueError("a query has no relevant document")
        hits = [int(index) in wanted for index in found]
        for k in recall_at:
            totals[f"recall@{k}"] += sum(hits[:k]) / len(wanted)
        first = next((rank for rank, hit in enumerate(hits[:cutoff]) if hit), None)
        totals[f"mrr@{cutoff}"] += 0.0 if first is None else 1.0 / (first + 1)
        dcg = sum(1.0 / math.log2(rank + 2) for rank, hit in enumerate(hits[:cutoff]) if hit)
        ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(len(wanted), cutoff)))
        totals[f"ndcg@{cutoff}"] += dcg / ideal
    return {name: value / len(relevant) for name, value in totals.items()}


def retrieval_set(anchors, positives, negatives=None):
    """(queries, documents, relevant) from pair columns: the distinct anchors are the
    queries, the distinct positives and negatives the documents, and a query's relevant
    documents are the positives of all its rows."""
    documents, index = [], {}
    for text in [*positives, *(negatives or [])]:
        if text not in index:
            index[text] = len(documents)
            documents.append(text)
    relevant = {}
    for anchor, positive in zip(anchors, positives):
        relevant.setdefault(anchor, set()).add(index[positive])
    return list(relevant), documents, list(relevant.values())


def evaluate_retrieval(queries, documents, relevant, recall_at=RECALL_AT, cutoff=10):
    """`retrieval_metrics` of exact cosine search of `queries` among `documents` (vectors)."""
    _, indices = top_k(queries, documents, k=max(*recall_at, cutoff))
    return retrieval_metrics(indices, relevant, recall_at, cutoff)


def similarity_correlations(a, b, scores):
    """Pearson and Spearman correlation of the cosine of row pairs of `a` and `b` with
    gold `scores` (sentence-transformers' EmbeddingSimilarityEvaluator, cosine)."""
    cosine = np.sum(_unit(a) * _unit(b), axis=1)
    return {"pearson": pearson(cosine, scores), "spearman": spearman(cosine, scores)}


# --- pair files, and an embedder's training and scoring runs -----------------------------

# The columns of a pairs TSV: in-batch negatives, or scored pairs.
PAIRS, SCORED = ("anchor", "positive", "negative"), ("text_a", "text_b", "score")


def read_retrieval_pairs(path):
    """(columns {name: [texts]}, scores or None) of a pairs TSV whose header names them:
    anchor, positive [, negative], or text_a, text_b, score."""
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


def read_pair_files(train_path, dev_path, max_examples=None):
    """((columns, scores), (dev columns, dev scores)) of a training pairs TSV (its first
    `max_examples` pairs) and a dev one, which must have the same columns."""
    columns, scores = read_retrieval_pairs(train_path)
    dev = read_retrieval_pairs(dev_path)
    if list(dev[0]) != list(columns) or (dev[1] is None) != (scores is None):
        raise ValueError(
            f"{train_path} has columns {list(columns)}{' + score' if scores else ''} but {dev_path} "
            f"has {list(dev[0])}{' + score' if dev[1] else ''}"
        )
    if max_examples:
        columns = {name: texts[:max_examples] for name, texts in columns.items()}
        scores = scores[:max_examples] if scores else None
    return (columns, scores), dev


def pair_batches(columns, scores, batch_size, seed):
    """Raw training batches of an embedder for `fit`: the text columns (and the scores as
    `y` when given), shuffled, of pairs of similar lengths."""
    texts = tuple(np.array(column, dtype=object) for column in columns.values())
    lengths = sum(np.char.str_len(np.array(column, dtype=str)) for column in columns.values())
    data = (texts,) if scores is None else (texts, np.asarray(scores, "float32"))
    return length_grouped_batches(data, lengths, batch_size, shuffle=True, seed=seed)


def embedder_scores(model, columns, scores, batch_size):
    """A `BertTextEmbedder` on dev pairs: the Pearson and Spearman correlations of cosine
    and score for scored pairs, else retrieval (`retrieval_set`: the anchors search the
    positives and negatives) by `evaluate_retrieval`."""
    texts = list(columns.values())
    if scores is not None:
        a, b = (model.encode(column, batch_size) for column in texts)
        return similarity_correlations(a, b, scores)
    queries, documents, relevant = retrieval_set(*texts)
    return evaluate_retrieval(
        model.encode_queries(queries, batch_size=batch_size),
        model.encode_documents(documents, batch_size=batch_size),
        relevant,
    )


class PairData(TaskData):
    """An embedder's pair files (`read_pair_files`): in-batch negatives
    (MultipleNegativesRankingLoss) scored as retrieval, kept by nDCG@10; or scored pairs
    (CoSENT) scored by correlation, kept by Spearman. `scale` is the losses' cosine
    scale, `symmetric` also ranks anchors for each positive."""

    labels = None

    def __init__(self, train_path, dev_path, max_examples=None, scale=20.0, symmetric=False):
        (self.columns, self.scores), (self.dev_columns, self.dev_scores) = read_pair_files(
            train_path, dev_path, max_examples
        )
        scored = self.scores is not None
        self.main_metric = "spearman" if scored else "ndcg@10"
        self.loss = CoSENTLoss(scale) if scored else MultipleNegativesRankingLoss(scale, symmetric=symmetric)
        self.train_size = len(next(iter(self.columns.values())))
        self.dev_size = len(next(iter(self.dev_columns.values())))

    def training_texts(self):
        return [text for column in self.columns.values() for text in column]

    def train_batches(self, batch_size, seed):
        return pair_batches(self.columns, self.scores, batch_size, seed)

    def evaluate(self, model, batch_size):
        return embedder_scores(model, self.dev_columns, self.dev_scores, batch_size)
