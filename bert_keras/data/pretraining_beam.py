"""The input shards of `pretraining_shards` on Apache Beam (`pip install bert-keras[beam]`).

One element per input shard: a DoFn makes and writes the shard's file with the same
`ShardMaker` as the local runner, so the files are byte for byte the same; a last step
writes the manifest. Beam retries failed work within a job; a rerun of a failed job skips
the shards its manifest lists. On a cluster runner the inputs and the output must be on
storage every worker reads (gs://, hdfs://, a shared mount), and the workers need
bert-keras installed (e.g. Dataflow's --setup_file or --sdk_container_image).
"""

import functools

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from bert_keras.data import pretraining_shards


class MakeShard(beam.DoFn):
    def __init__(self, tokenizer_config, recipe, directory):
        self.tokenizer_config = tokenizer_config
        self.recipe = recipe
        self.directory = directory

    def setup(self):
        self.maker = pretraining_shards.ShardMaker.from_config(self.tokenizer_config, self.recipe)

    def process(self, shard):
        yield self.maker(shard, self.directory)


def runner(options):
    """The `beam_runner` of `pretraining_shards.create_pretraining_data` for Beam flags
    `options` (e.g. ["--runner=DataflowRunner", "--project=...", ...])."""
    return functools.partial(run, options=options)


def run(shards, directory, tokenizer, recipe, output, settings, finished, options):
    """Makes `shards` on the runner named in `options` (Beam flags); then writes the manifest."""

    def write_manifest(made):
        pretraining_shards.write_manifest(output, settings, finished + made, complete=True)

    with beam.Pipeline(options=PipelineOptions(options)) as pipeline:
        _ = (
            pipeline
            | "Shards" >> beam.Create(shards)
            | "Spread" >> beam.Reshuffle()
            | "Make" >> beam.ParDo(MakeShard(pretraining_shards.tokenizer_config(tokenizer), recipe, directory))
            | "Gather" >> beam.combiners.ToList()
            | "Manifest" >> beam.Map(write_manifest)
        )
