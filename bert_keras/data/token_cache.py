"""The token cache of `dynamic_masking_dataset`: each text file tokenized once into a file of token ids."""

import hashlib
import json
import os
import sys

import keras
import tensorflow as tf

from bert_keras.data.documents import check_format, tokenizer_fingerprint
from bert_keras.data.graph_documents import read_files, tokenized_documents

# A token file: int32 little-endian [magic, version, documents, sentences, the sentence
# count of each document, the token count of each sentence, the token ids].
_TOKEN_FILE_MAGIC, _TOKEN_FILE_VERSION, _TOKEN_FILE_SUFFIX = 0x424B5443, 1, ".tokens"  # "BKTC"


def cache_tokenized_files(files, tokenizer, directory, format="auto", readers=8, progress=False):
    """Tokenizes each text file into a token file in `directory` unless it is there
    already: the token files' paths, in the order of `files`.

    A token file is named after its text file's path, size and modification time, the
    tokenizer and the format, so a changed input or tokenizer gets a new one. Each is
    written whole or not at all (a temporary file renamed), so a run killed half-way
    keeps the files it finished and the next run tokenizes only the rest. About 4 bytes
    a token: as much disk as the text.
    """
    check_format(format)
    tf.io.gfile.makedirs(directory)
    settings = {"version": _TOKEN_FILE_VERSION, "format": format, "tokenizer": tokenizer_fingerprint(tokenizer)}
    paths = []
    for file in files:
        stat = tf.io.gfile.stat(file)
        key = json.dumps({**settings, "path": file, "bytes": stat.length, "mtime_ns": stat.mtime_nsec}, sort_keys=True)
        name = f"{os.path.basename(file)}.{hashlib.sha256(key.encode()).hexdigest()[:16]}{_TOKEN_FILE_SUFFIX}"
        paths.append(os.path.join(directory, name))
    todo = [(file, path) for file, path in zip(files, paths) if not tf.io.gfile.exists(path)]
    if not todo:
        return paths
    bar = None
    if progress:
        print(f"tokenizing {len(todo)} of {len(files)} file(s) into {directory}", file=sys.stderr, flush=True)
        bar = keras.utils.Progbar(len(files), unit_name="file")
        bar.update(len(files) - len(todo))

    def token_file(path):
        documents = tokenized_documents(tf.io.read_file(path), tokenizer, format)
        return tf.concat(
            [
                [_TOKEN_FILE_MAGIC, _TOKEN_FILE_VERSION],
                tf.cast([documents.nrows(), documents.values.nrows()], tf.int32),
                tf.cast(documents.row_lengths(), tf.int32),
                tf.cast(documents.values.row_lengths(), tf.int32),
                documents.flat_values,
            ],
            0,
        )

    tokenized = read_files([file for file, _ in todo], token_file, readers)
    for done, ((_, path), ids) in enumerate(zip(todo, tokenized.as_numpy_iterator()), len(files) - len(todo) + 1):
        partial = f"{path}.partial-{os.getpid()}"
        with tf.io.gfile.GFile(partial, "wb") as file:
            file.write(ids.astype("<i4").tobytes())
        tf.io.gfile.rename(partial, path, overwrite=True)
        if bar is not None:
            bar.update(done)
    return paths


def read_token_file(path):
    """A token file -> ragged `[documents, (sentences), (tokens)]` int32 ids."""
    ids = tf.io.decode_raw(tf.io.read_file(path), tf.int32, little_endian=True)
    documents, sentences = ids[2], ids[3]
    sentence_lengths = ids[4 + documents : 4 + documents + sentences]
    whole = tf.reduce_all(
        tf.equal(
            tf.stack([ids[0], ids[1], tf.size(ids)]),
            tf.stack(
                [_TOKEN_FILE_MAGIC, _TOKEN_FILE_VERSION, 4 + documents + sentences + tf.reduce_sum(sentence_lengths)]
            ),
        )
    )
    check = tf.debugging.Assert(whole, ["not a whole bert-keras token file (magic, version, size):", path])
    with tf.control_dependencies([check]):
        tokens = tf.identity(ids[4 + documents + sentences :])
    return tf.RaggedTensor.from_row_lengths(
        tf.RaggedTensor.from_row_lengths(tokens, sentence_lengths, validate=False),
        ids[4 : 4 + documents],
        validate=False,
    )
