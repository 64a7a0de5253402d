"""The batches a pre-training run reads, one input pipeline at a time.

`PretrainingInputs` is one phase's data: TFRecords made by `create-pretraining-data`
(or the original tool) or text files masked anew every epoch (dynamic masking), at the
phase's lengths. Each `tf.distribute` input pipeline reads its share of the files, skips
the steps a resumed run already trained on, and may pack several instances a row.
Held-out batches are masked once, with a fixed seed, so every evaluation sees the same.
"""

import dataclasses
from collections.abc import Sequence

import tensorflow as tf

from bert_keras.data import tfrecords
from bert_keras.data.dynamic_masking import dynamic_masking_dataset
from bert_keras.data.packing import pack_dataset, packing_statistics
from bert_keras.training import distribute

EVAL_SEED = 12345  # held-out text: one fixed masking, the same at every evaluation
PROBE_BATCH = 64  # instances a batch when packing: the first-fit-decreasing input


@dataclasses.dataclass(frozen=True)
class PretrainingInputs:
    """TFRecords (`records`) or text files (`corpus`: one sentence a line, a blank line
    between documents) at `seq_length` with up to `max_predictions_per_seq` masked
    tokens; `tokenizer` splits the text (a `BertTokenizer`), and `token_cache` keeps
    each text file's tokens (default: none)."""

    tokenizer: object
    records: Sequence[str] = ()
    corpus: Sequence[str] = ()
    seq_length: int = 128
    max_predictions_per_seq: int = 20
    whole_word_mask: bool = False
    seed: int = 0
    token_cache: str | None = None

    def __post_init__(self):
        if bool(self.records) == bool(self.corpus):
            raise ValueError("pre-training reads TFRecords (records) or text files (corpus): give one of them")

    def check(self, input_pipelines, what):
        """Before training: the first records of every TFRecord read and parsed (an error
        names the file), or the text files' sizes, and every input pipeline's share of
        them non-empty (`what` names the files in the error)."""
        if self.records:
            files = tfrecords.expand_files(self.records)
            counts = dict(zip(files, tfrecords.check_tfrecords(files, self.seq_length, self.max_predictions_per_seq)))
            distribute.check_shares(files, input_pipelines, lambda path: not counts[path], what)
        else:
            corpus = tfrecords.expand_files(self.corpus)
            distribute.check_shares(corpus, input_pipelines, lambda path: not tf.io.gfile.stat(path).length, what)

    def instances(self, batch_size, context, skip=0):
        """Batches of unpacked instances from this input pipeline's share of the files,
        the first `skip` left out."""
        if self.records:
            files = distribute.shard_files(tfrecords.expand_files(self.records), context)
            return tfrecords.pretraining_dataset(
                files,
                batch_size,
                self.seq_length,
                self.max_predictions_per_seq,
                seed=self.seed,
                skip_batches=skip,
            )
        return dynamic_masking_dataset(
            distribute.shard_files(tfrecords.expand_files(self.corpus), context),
            self.tokenizer,
            batch_size,
            self.seq_length,
            self.max_predictions_per_seq,
            whole_word_mask=self.whole_word_mask,
            seed=self.seed,
            skip_batches=skip,
            token_cache=self.token_cache,
            progress=True,
        )

    def batches(self, batch_size, context, skip_steps=0, packing=0, packing_window=1024):
        """One input pipeline's training batches of `batch_size` (per replica; rows of up
        to `packing` instances, packed `packing_window` instances at a time, when
        `packing`), after the `skip_steps` global steps already trained."""
        skip = skip_steps * distribute.local_replicas(context)
        if not packing:
            return self.instances(batch_size, context, skip)
        instances = self.instances(PROBE_BATCH, context)
        return pack_dataset(instances, self.seq_length, packing, batch_size, packing_window).skip(skip)

    def packing_report(self, batch_size, packing, packing_window, replicas):
        """The packing of the first window of data (`packing_statistics`), with the rows
        a global step of `batch_size` instances takes (a multiple of `replicas`)."""
        probe = self.instances(PROBE_BATCH, tf.distribute.InputContext())
        stats = packing_statistics(probe, self.seq_length, packing, packing_window)
        rows = replicas * max(1, round(batch_size / stats["sequences_per_row"] / replicas))
        return {**stats, "max_sequences": packing, "rows_per_step": rows, "instances_per_step": batch_size}

    def held_out_steps(self, batch_size, eval_steps):
        """Global batches an evaluation takes: `eval_steps`, or fewer when the held-out
        TFRecords hold fewer (text is an endless stream)."""
        if not self.records:
            return eval_steps
        files = tfrecords.expand_files(self.records)
        records = sum(1 for _ in tf.data.TFRecordDataset(files))
        if records < batch_size:
            raise ValueError(
                f"held-out data {' '.join(files)}: {records} records, fewer than one batch of {batch_size}"
            )
        return min(eval_steps, records // batch_size)

    def held_out(self, batch_size, eval_steps, context):
        """This input pipeline's share of `eval_steps` held-out batches: the same records,
        masks and order at every evaluation (text is masked once, with `EVAL_SEED`)."""
        if self.records:
            dataset = tfrecords.pretraining_dataset(
                tfrecords.expand_files(self.records),
                batch_size,
                self.seq_length,
                self.max_predictions_per_seq,
                shuffle_buffer=0,
                repeat=False,
            )
        else:
            dataset = dynamic_masking_dataset(
                tfrecords.expand_files(self.corpus),
                self.tokenizer,
                batch_size,
                self.seq_length,
                self.max_predictions_per_seq,
                whole_word_mask=self.whole_word_mask,
                seed=EVAL_SEED,
                token_cache=self.token_cache,
            )
        dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        return dataset.take(eval_steps * distribute.local_replicas(context)).cache()

    def corrupt_record_error(self, error, phase):
        """The error for a `DataLossError` met while training: TensorFlow's message names
        no file, so the files are read again to find the broken one (which raises its own
        error); otherwise a `ValueError` naming the files."""
        tfrecords.find_corrupt_tfrecord(tfrecords.expand_files(self.records))
        return ValueError(
            f"{phase}: a TFRecord of {' '.join(map(str, self.records))} is corrupt: {tfrecords.tf_error_text(error)}"
        )
