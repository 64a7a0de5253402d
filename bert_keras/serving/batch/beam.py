"""`predict` on Apache Beam's RunInference (`pip install bert-keras[beam]`).

`BertModelHandler` is a Beam `ModelHandler` of a bert-keras model: usable in any Beam
pipeline with `RunInference`, also wrapped in `KeyedModelHandler` for (key, row) pairs.
Each worker loads the model once (`runner.predictor_for`: a `.keras` file, a checkpoint
folder or a SavedModel export), and each batch Beam hands it is sorted by length and run
in batches padded only to their own longest text, giving the records `predict` writes.

`predict_on_beam` is `bert-keras predict --runner`: the input files read row by row as
the local run reads them (so the ids are the same), RunInference, and the records as
JSON-lines shards `OUT-SSSSS-of-NNNNN.jsonl` in Beam's order (each record has its id);
with `top_k_per_query`, a reranker's best rows of each query, by Beam's combine per key
(`RankTopPerQuery`: at most K records a query are held).
On a cluster runner the model, the inputs and OUT must be on storage every worker reads
and the workers need bert-keras installed (as for `pretraining_beam`)."""

import json
from collections.abc import Mapping

import apache_beam as beam
import tensorflow as tf
from apache_beam.ml.inference.base import KeyedModelHandler, ModelHandler, RunInference
from apache_beam.options.pipeline_options import PipelineOptions

from bert_keras.serving.batch.options import PredictOptions
from bert_keras.serving.batch.ranking import check_top_k_per_query, query_segment, rank_key, ranked
from bert_keras.serving.batch.readers import Row, RowReader, input_files
from bert_keras.serving.batch.runner import ON_ERROR, predictor_for


class BertModelHandler(ModelHandler):
    """A bert-keras model (`model_path`) answering Beam batches of rows with records.

    An element is a text (a one-segment model), a dict of texts by the model's segment
    names, or a `readers.Row` (whose id the record carries), predicted with `options`
    (`PredictOptions`); Beam's batches hold `min_batch_size` to `max_batch_size` elements
    (default the options' `batch_size` to 8x it: the buffer each batch is length-sorted in). Other keyword
    arguments go to `ModelHandler` (`large_model=True` shares one model across a worker's
    processes)."""

    def __init__(self, model_path, options=None, on_error="raise", min_batch_size=None, max_batch_size=None, **kwargs):
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.options = options or PredictOptions()
        batch_size = self.options.batch_size
        super().__init__(
            min_batch_size=batch_size if min_batch_size is None else min_batch_size,
            max_batch_size=8 * batch_size if max_batch_size is None else max_batch_size,
            **kwargs,
        )
        self.model_path = str(model_path)
        self.on_error = on_error

    def load_model(self):
        """The predictor (`BatchPredictor` or `SavedModelPredictor`) of the model."""
        return predictor_for(self.model_path, self.options)

    def run_inference(self, batch, model, inference_args=None):
        """The record of each element of `batch`, in its order."""
        rows = [_row(element, model.segments) for element in batch]
        results = model.predict_rows(rows, self.on_error)
        return [
            {key: value for key, value in record.items() if key != "id"} if row.id is None else record
            for row, record in zip(rows, results)
        ]

    def get_num_bytes(self, batch):
        return sum(_length_in_bytes(element) for element in batch)

    def get_metrics_namespace(self):
        return "BertModelHandler"


def _row(element, segments):
    """A `Row` (id None for a text or dict) of an element of a batch."""
    if isinstance(element, Row):
        return element
    if isinstance(element, str):
        if len(segments) != 1:
            raise ValueError(f"a text alone is a row of a one-segment model; this model reads {list(segments)}")
        return Row(None, {segments[0]: element})
    if isinstance(element, Mapping):
        missing = [segment for segment in segments if segment not in element]
        if missing:
            raise ValueError(f"a row lacks {missing}: the model reads {list(segments)}, the row has {list(element)}")
        return Row(None, {segment: element[segment] for segment in segments})
    raise TypeError(f"an element is a text, a dict of texts or a Row, not {type(element).__name__}")


def _length_in_bytes(element):
    """An element's texts' size in UTF-8 bytes."""
    texts = (element.texts or {}) if isinstance(element, Row) else element
    if isinstance(texts, str):
        return len(texts.encode("utf-8"))
    values = [text for value in texts.values() for text in ([value] if isinstance(value, str) else value)]
    return sum(len(text.encode("utf-8")) for text in values)


def keyed_rows(file, segments, columns=None, id_column=None, list_segment=None):
    """((index, row in the file), `Row`) for each row of `file`, (index, path) of the inputs'
    `index`th, as `predict`'s `RowReader` reads it: the key is the row's place in the input."""
    index, path = file
    for number, row in enumerate(RowReader([path], segments, columns, id_column, list_segment)):
        yield (index, number), row


def shards_prefix(output):
    """`OUT.jsonl` -> the prefix of its shards, `OUT`."""
    output = str(output)
    if not output.endswith(".jsonl"):
        raise ValueError(f"--output {output}: a Beam run writes JSON-lines shards; name it OUT.jsonl")
    return output[: -len(".jsonl")]


class RankTopPerQuery(beam.PTransform):
    """((position, query), record) pairs -> the `k` best records of each query by the local
    run's order (`ranking.rank_key`: ties to the earlier `position`, a tuple of numbers in
    input order), ranked as it ranks them (`ranking.ranked`), and the records in error."""

    def __init__(self, k):
        super().__init__()
        check_top_k_per_query(k)
        self.k = k

    def expand(self, keyed):
        errors = keyed | "Errors" >> beam.Filter(lambda pair: "error" in pair[1]) | "Error" >> beam.Values()
        top = (
            keyed
            | "Scored" >> beam.Filter(lambda pair: "error" not in pair[1])
            | "ByQuery" >> beam.MapTuple(lambda key, record: (key[1], (key[0], record)))
            | "Top" >> beam.combiners.Top.PerKey(self.k, key=lambda item: rank_key(item[1]["score"], item[0]))
            | "Rank" >> beam.FlatMapTuple(lambda query, items: ranked(query, [record for _, record in items]))
        )
        return (top, errors) | beam.Flatten()


def _keyed_by_query(pair, segment):
    """(position, row) -> ((position, the row's query), row)."""
    key, row = pair
    return (key, None if row.texts is None else row.texts[segment]), row


def predict_on_beam(
    model,
    inputs,
    output,
    beam_options,
    options=None,
    *,
    columns=None,
    id_column=None,
    on_error="raise",
    top_k_per_query=None,
):
    """`predict_files` on the Beam runner named in `beam_options` (Beam flags): the
    records of every row of `inputs` into `OUT-SSSSS-of-NNNNN.jsonl` shards, or with
    `top_k_per_query` a reranker's best rows of each query, with `options`
    (`PredictOptions`). Returns the shards' paths."""
    prefix = shards_prefix(output)
    if tf.io.gfile.glob(f"{prefix}-*-of-*.jsonl"):
        raise FileExistsError(f"{prefix}-*-of-*.jsonl exist (a finished run); remove them to predict again")
    files = input_files(inputs)
    handler = BertModelHandler(model, options, on_error)
    loaded = handler.load_model()  # the model's segments; a bad model path fails before the pipeline starts
    segments, list_segment = loaded.segments, (loaded.segments[-1] if loaded.choices else None)
    if top_k_per_query is not None:
        check_top_k_per_query(top_k_per_query, loaded.kind)
    del loaded
    with beam.Pipeline(options=PipelineOptions(beam_options)) as pipeline:
        rows = (
            pipeline
            | "Files" >> beam.Create(list(enumerate(files)))
            | "Rows" >> beam.FlatMap(keyed_rows, segments, columns, id_column, list_segment)
        )
        if top_k_per_query is not None:
            rows = rows | "Query" >> beam.Map(_keyed_by_query, query_segment(segments))
        predicted = rows | "Spread" >> beam.Reshuffle() | "Predict" >> RunInference(KeyedModelHandler(handler))
        if top_k_per_query is None:
            records = predicted | "Records" >> beam.Values()
        else:
            records = predicted | "RankTopPerQuery" >> RankTopPerQuery(top_k_per_query)
        _ = (
            records
            | "Json" >> beam.Map(lambda record: json.dumps(record, ensure_ascii=False))
            | "Write" >> beam.io.WriteToText(prefix, file_name_suffix=".jsonl")
        )
    return sorted(tf.io.gfile.glob(f"{prefix}-*-of-*.jsonl"))
