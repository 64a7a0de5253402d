"""Dynamic masking as a `tf.data` pipeline: raw text in, new pre-training batches every epoch.

The original create_pretraining_data.py recipe (`instances.InstanceMaker`) with
every step in the graph, so tf.data runs it on all cores and no Python runs per element:

1. Files are dealt to `cycle_length` readers, which read them in parallel, each in a new
   order every epoch (seeded), a whole file at a time (shard a large corpus into files of
   tens of MB). Each reader has its own map function: TensorFlow's regex kernels
   serialize the threads that share one.
2. A file -> documents of sentences, as `documents.read_documents` reads it
   ("lines", "prose" or "auto" per file), then the in-graph `BertTokenizer` on all of
   its sentences at once. With a token cache this runs once per file, before the first
   epoch, and every epoch reads the token ids it wrote.
3. Documents of the readers' current files are interleaved and taken in groups of
   `documents_per_group`; each group becomes instances in one parallel map: the recipe's
   A/B chunks (short targets with `short_seq_prob`, IsNext from the same chunk, NotNext
   with a B from a random other document, unused sentences put back), truncation and
   80/10/10 masking, for all of the group's documents at once.
4. Instances are shuffled within their group, then cut into batches.

Differences from the recipe, by design: the "random other document" of a NotNext pair is
drawn from the documents of the same group (uniformly, as the original draws from the
whole corpus), not from the whole corpus. Randomness is stateless, seeded by
(seed, group index), so the stream is the same on every run for a seed and a resumed
run can skip the batches it already trained on. The statistics are the recipe's:
chunks follow the same walk (found by pointer doubling, not step by step), truncation
removes the same number of tokens (its front/back coin flips summed as a binomial), and
masking takes whole words greedily in a random order, as the original does (single
tokens: num_to_predict of them drawn without replacement, which that order amounts to).
"""

import os

import tensorflow as tf

from bert_keras.data.documents import check_format
from bert_keras.data.graph_documents import read_files, tokenized_documents
from bert_keras.data.graph_instances import GraphInstanceMaker
from bert_keras.data.instances import InstanceMaker
from bert_keras.data.tfrecords import expand_files
from bert_keras.data.token_cache import cache_tokenized_files, read_token_file


def dynamic_masking_dataset(
    input_files,
    tokenizer,
    batch_size,
    max_seq_length=128,
    max_predictions_per_seq=20,
    masked_lm_prob=0.15,
    short_seq_prob=0.1,
    whole_word_mask=False,
    seed=0,
    format="auto",
    skip_batches=0,
    documents_per_group=256,
    cycle_length=8,
    token_cache=None,
    parallel_calls=None,
    progress=False,
):
    """An endless dataset of the model's feature dict made from raw text files.

    New A/B pairings and masks every epoch; the same stream for the same arguments, so
    a resumed run can `skip_batches`. Static shapes (`drop_remainder`). A corpus with no
    text at all is an error when the first batch is read. With `token_cache` (a folder)
    each file is tokenized once, up front, into a file of token ids there
    (`cache_tokenized_files`), and every epoch reads those: the same stream, but later
    epochs and runs only pair and mask. `cycle_length` files are read at once;
    `parallel_calls` groups are paired and masked at once (default: the cores this
    process may use). The stream depends on the seed, the files and `cycle_length`, not
    on `parallel_calls` or the cache.
    """
    check_format(format)
    files = expand_files(input_files)
    maker = GraphInstanceMaker(
        InstanceMaker(
            tokenizer.vocabulary,
            max_seq_length=max_seq_length,
            short_seq_prob=short_seq_prob,
            masked_lm_prob=masked_lm_prob,
            max_predictions_per_seq=max_predictions_per_seq,
            whole_word_mask=whole_word_mask,
        )
    )
    if token_cache is None:

        def read(path):
            return tokenized_documents(tf.io.read_file(path), tokenizer, format)
    else:
        files = cache_tokenized_files(files, tokenizer, token_cache, format, cycle_length, progress)
        read = read_token_file
    # Each file once an epoch, in a new order every epoch.
    dataset = read_files(files, read, cycle_length, seed)
    dataset = dataset.interleave(tf.data.Dataset.from_tensor_slices, cycle_length=cycle_length, block_length=1)
    # Groups within an epoch, so a small corpus does not pair a document with its own copy.
    dataset = dataset.batch(documents_per_group)
    # An empty corpus ends `repeat`; the assertion turns that into an error.
    dataset = dataset.repeat().apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    dataset = dataset.enumerate()
    # do_not_convert here and in read_files: the functions use tf.cond/tf.while_loop themselves,
    # and AutoGraph's conversion of them took longer than building their graphs.
    dataset = dataset.map(
        tf.autograph.experimental.do_not_convert(
            lambda index, documents: maker.instances(documents, tf.stack([tf.cast(seed, tf.int64), index]))
        ),
        # AUTOTUNE picks 1 for these few large elements; order does not depend on it.
        num_parallel_calls=parallel_calls or _usable_cores(),
        deterministic=True,
    )
    dataset = dataset.rebatch(batch_size, drop_remainder=True)
    if skip_batches:
        dataset = dataset.skip(skip_batches)
    options = tf.data.Options()
    options.deterministic = True
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def _usable_cores():
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
