"""A reranker's best passages per query (`predict --top-k-per-query K`), as
sentence-transformers' `CrossEncoder.rank` gives them for one query, over a corpus of
(query, passage) rows whose rows of one query may be anywhere in any file.

The rows' scores are predicted and kept in the parts as any run's (so a killed run
resumes as one without ranking); the ranking is one pass over them at the end with a
bounded heap per distinct query: memory holds at most K records of each query (its id,
score and the query once), not the rows."""

import heapq

from bert_keras.serving.batch.readers import Row


def check_top_k_per_query(k, kind="reranker"):
    """A clear error, before any row is predicted, unless `k` best rows of each query of a
    `kind` model can be ranked: a reranker's, at least one."""
    if kind != "reranker":
        raise ValueError(f"--top-k-per-query ranks a reranker's passages; this model is a {kind}")
    if k < 1:
        raise ValueError(f"top-k-per-query must be at least 1, got {k}")


def query_segment(segments):
    """The segment that holds a reranker's query: `query` when the model names one, else its first."""
    return "query" if "query" in segments else segments[0]


class QueryPredictor:
    """A reranker's predictor whose records also carry their row's query, to rank `k` a
    query by; the rest of the predictor's interface (`RowPredictor`) is the wrapped one's."""

    def __init__(self, predictor, k):
        check_top_k_per_query(k, predictor.kind)
        self.predictor = predictor
        self.kind, self.segments, self.choices = predictor.kind, predictor.segments, predictor.choices
        self.segment = query_segment(predictor.segments)

    def predict_rows(self, rows, on_error="raise"):
        records = self.predictor.predict_rows(rows, on_error)
        return [_record_with_query(row, record, self.segment) for row, record in zip(rows, records)]

    def truncation_notice(self, dropped):
        return self.predictor.truncation_notice(dropped)


def _record_with_query(row: Row, record, segment):
    """`record` with its row's query (a record in error as it is)."""
    return record if "error" in record else {**record, "query": row.texts[segment]}


def rank_key(score, position):
    """The one order of a query's records, the local run's and Beam's, largest best: the
    higher score, then on a tie the row earlier in the input (`position`, a tuple of
    numbers in input order: the row's count locally, (file, row in file) on Beam)."""
    return (score, *(-number for number in position))


class TopPerQueryHeaps:
    """The `k` best records of each query by `rank_key`, fed one at a time in input order."""

    def __init__(self, k):
        check_top_k_per_query(k)
        self.k, self.heaps, self.seen = k, {}, 0

    def add(self, record):
        query = record["query"]
        entry = (
            rank_key(record["score"], (self.seen,)),
            {key: value for key, value in record.items() if key != "query"},
        )
        self.seen += 1
        heap = self.heaps.setdefault(query, [])
        if len(heap) < self.k:
            heapq.heappush(heap, entry)
        elif entry[0] > heap[0][0]:
            heapq.heapreplace(heap, entry)

    def records(self):
        """Each query's records, best first, in the order the queries were first met."""
        for query, heap in self.heaps.items():
            yield from ranked(query, [entry[1] for entry in sorted(heap, key=lambda entry: entry[0], reverse=True)])


def ranked(query, records):
    """`records` (best first) of one query as the ranking's records: query, rank (from 1), then the record."""
    return [{"query": query, "rank": rank, **record} for rank, record in enumerate(records, start=1)]


def top_per_query(records, k):
    """The ranking of the scored records (with their query) that `records()` yields:
    each query's best `k`, then the records in error as they are (a second pass)."""
    top = TopPerQueryHeaps(k)
    for record in records():
        if "error" not in record:
            top.add(record)
    yield from top.records()
    yield from (record for record in records() if "error" in record)
