"""`count_words` on Apache Beam (`pip install bert-keras[beam]`), for corpora on shared storage.

The same corpus parts and `count_part` as the local count, summed per word by Beam, so
the counts are the same whatever the runner. The sums are written as JSON lines to
`counts_prefix`-SSSSS-of-NNNNN, read back and removed: on a cluster runner the corpus and
that prefix must be on storage every worker reads (gs://, hdfs://, a shared mount), and
the workers need bert-keras installed (as for `pretraining_beam`).
"""

import collections
import json

import apache_beam as beam
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions

from bert_keras.text.vocab import PART_BYTES, corpus_parts, count_part


def count_words(files, counts_prefix, options, lower_case=True, part_bytes=PART_BYTES):
    """Word counts over the lines of `files` on the runner named in `options` (Beam flags)."""
    parts = corpus_parts(list(files), part_bytes)
    with beam.Pipeline(options=PipelineOptions(options)) as pipeline:
        _ = (
            pipeline
            | "Parts" >> beam.Create(parts)
            | "Spread" >> beam.Reshuffle()
            | "Count" >> beam.FlatMap(lambda part: count_part(part, lower_case).items())
            | "Sum" >> beam.CombinePerKey(sum)
            | "Json" >> beam.Map(lambda word_count: json.dumps(word_count, ensure_ascii=False))
            | "Write" >> beam.io.WriteToText(counts_prefix)
        )
    counts = collections.Counter()
    for path in tf.io.gfile.glob(f"{counts_prefix}-*-of-*"):
        with tf.io.gfile.GFile(path, "r") as lines:
            counts.update(dict(json.loads(line) for line in lines))
        tf.io.gfile.remove(path)
    return counts
