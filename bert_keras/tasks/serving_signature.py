"""What a head's export answers: `ServingSignature` and the helpers heads build theirs with."""

import tensorflow as tf

from bert_keras.models.encoder import INPUT_NAMES
from bert_keras.tasks.windowing import pack_windows, preprocess_windows


def as_float32(tensor):
    """Floating outputs as float32 (REST JSON has no bfloat16); others unchanged."""
    return tf.cast(tensor, tf.float32) if tensor.dtype.is_floating else tensor


class ServingSignature:
    """What an export of `model` answers: `serving_default` on raw strings (`from_text`)
    and `serve_ids` on packed int32 ids (`from_ids`), both graph functions returning a
    dict of named outputs, floats as float32.

    `run(packed)` is the model at inference; the exporter passes `from_text` a `run`
    that may compute length-sorted micro-batches (unless `micro_batching` is False, for
    inputs that are not `[batch, seq]`), which needs `token_outputs`: the keys of
    per-token outputs (None when the model's output is itself one per-token tensor).
    `segments` are the default string input names. Both come from the model's own
    declaration (`text_input_names`, `token_output_names`), which `fit` reads too.
    `label_table` holds class names (a tuple of strings) for heads that have them. By
    default `from_ids` returns the model's dict of outputs as float32; subclasses override
    it for other outputs, and `from_text` when text needs more than packing (e.g. answers
    mapped back to it).

    A head with a `doc_stride` is served whole documents: `pack` makes its windows in the
    graph, at most `max_windows` per document (the model's, unless the exporter sets
    another), and `serve_ids` takes windowed ids `[batch, windows, seq]`.
    """

    micro_batching = True
    # The export adds a `word_pieces` signature (`word_pieces`); False where the rows are
    # not one packing of the texts (multiple choice).
    serves_word_pieces = True

    def __init__(self, model, preprocessor, label_table=None):
        self.model = model
        self.segments = tuple(model.text_input_names)
        self.token_outputs = model.token_output_names
        self.preprocessor = preprocessor
        self.label_table = label_table
        self.doc_stride = getattr(model, "doc_stride", None)
        self.max_windows = getattr(model, "max_windows", None)
        if self.doc_stride is not None:
            self.micro_batching = False  # micro-batches cut `[batch, seq]` rows, not windows

    def pack(self, texts):
        """Request texts (one `[batch]` string tensor per segment) -> packed model inputs,
        windowed with a `doc_stride`; a document longer than the bounded tokenizer reads
        (see `export_for_serving`) or than `max_windows` is refused (INVALID_ARGUMENT)."""
        if self.doc_stride is None:
            return self.preprocessor(texts)
        limit = self.preprocessor.tokenizer.max_input_bytes
        if limit is not None and self.max_windows is not None:
            checks = [
                tf.debugging.assert_less_equal(
                    tf.strings.length(text),
                    limit,
                    message=f"a document is longer than the {limit} bytes max_windows={self.max_windows} windows read",
                )
                for text in texts
            ]
            with tf.control_dependencies(checks):
                texts = [tf.identity(text) for text in texts]
        return preprocess_windows(self.preprocessor, texts, self.doc_stride, self.max_windows).inputs

    def run(self, packed):
        return self.model(packed, training=False)

    def tokenize(self, texts):
        """Request texts -> (ids, starts, ends) of each segment, as `pack` reads them
        (`BertTokenizer.tokenize_with_offsets`: byte offsets in the text)."""
        return [self.preprocessor.tokenizer.tokenize_with_offsets(text) for text in texts]

    def word_pieces(self, texts):
        """What the model reads of `texts`, for people: `word_pieces_outputs` of `tokenize`,
        in the windows `pack` makes with a `doc_stride`."""
        return word_pieces_outputs(self.preprocessor, self.tokenize(texts), self.doc_stride, self.max_windows)

    def text_signatures(self, run):
        """More signatures on `serving_default`'s string inputs, for people and the page of
        `bert-keras serve`: {name: function of the texts}; `run` as `from_text`'s."""
        return {}

    def text_inputs(self, segments):
        """`serving_default`'s inputs: one `[batch]` string tensor per segment."""
        return [tf.TensorSpec([None], tf.string, name=name) for name in segments]

    def ids_inputs(self):
        """`serve_ids`' inputs: the packed int32 `[batch, seq]` (windowed: `[batch,
        windows, seq]`) tensors."""
        shape = [None, None] if self.doc_stride is None else [None, None, None]
        return [tf.TensorSpec(shape, tf.int32, name=name) for name in INPUT_NAMES]

    def warmup_inputs(self, segments, texts):
        """A warm-up request's inputs for these texts (TF Serving replays them at load)."""
        return {name: list(texts) for name in segments}

    def from_text(self, texts, run):
        return self.from_ids(self.pack(list(texts)), run)

    def from_ids(self, packed, run):
        return {key: as_float32(value) for key, value in run(packed).items()}


def word_pieces_outputs(preprocessor, tokenized, doc_stride=None, max_windows=None):
    """The packing of `tokenized` ((ids, starts, ends) ragged `[batch, (pieces)]` per
    segment) for people to read: `word_pieces` `[batch, seq]` (the packed tokens, "" past
    each row's end), `input_type_ids` (each piece's segment), `kept_bytes` `[batch,
    segments]` (where in each segment's text the kept pieces end: the bytes after it were
    not read, cut by truncation or by the tokenizer's byte bound) and `truncated_pieces`
    `[batch, segments]` (the pieces truncation dropped). With a `doc_stride` the pieces
    are the windows `pack_windows` makes, `[batch, windows, seq]` ("" in padding
    windows); the windows hold the whole last segment."""
    ids = [segment_ids for segment_ids, _, _ in tokenized]
    if doc_stride is None:
        packed = first = preprocessor.packer(ids)
    else:
        packed = pack_windows(preprocessor.packer, ids, doc_stride, max_windows).inputs
        first = {name: tensor[:, 0] for name, tensor in packed.items()}
    mask = packed["input_mask"] > 0
    vocabulary = tf.constant(preprocessor.tokenizer.vocabulary)
    tokens = tf.where(mask, tf.gather(vocabulary, packed["input_word_ids"]), "")
    kept_bytes, truncated = [], []
    for segment, (segment_ids, _, ends) in enumerate(tokenized):
        if doc_stride is not None and segment == len(tokenized) - 1:
            kept = segment_ids.row_lengths()
        else:
            # Segment i's pieces have type i, with its [SEP] (and the [CLS] before segment 0);
            # a pair's first segment is the same in every window.
            in_segment = tf.logical_and(first["input_mask"] > 0, tf.equal(first["input_type_ids"], segment))
            kept = tf.reduce_sum(tf.cast(in_segment, tf.int64), axis=1) - (2 if segment == 0 else 1)
        none = tf.size(ends.flat_values, out_type=tf.int64)  # the 0 appended below
        last = tf.where(kept > 0, ends.row_starts() + kept - 1, none)
        kept_bytes.append(tf.gather(tf.concat([ends.flat_values, [0]], 0), last))
        truncated.append(segment_ids.row_lengths() - kept)
    return {
        "word_pieces": tokens,
        "input_type_ids": packed["input_type_ids"],
        "kept_bytes": tf.stack(kept_bytes, axis=1),
        "truncated_pieces": tf.stack(truncated, axis=1),
    }


def label_table(labels, count, model):
    """`labels` as a tuple of strings (None stays None); there must be `count` of them.

    Not a tensor: each graph that uses it makes its own constant. A tensor made once is
    captured as an input by every graph function, which tf2onnx leaves as a missing input."""
    if labels is None:
        return None
    if len(labels) != count:
        raise ValueError(f"{len(labels)} labels for {model}")
    return tuple(str(label) for label in labels)


def label_names(table, ids):
    """The names of label `ids`, "" for -1: a gather from a constant, which LiteRT runs
    on strings too (it has no string select)."""
    return tf.gather(tf.constant(("", *table)), ids + 1)


def check_no_labels(model, labels):
    if labels is not None:
        raise ValueError(f"{type(model).__name__} has no classes to name; labels are for classifiers and taggers")
