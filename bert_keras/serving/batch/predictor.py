"""A model answering batches of rows as records: each chunk sorted by length into
batches padded only to their own longest row, as the server's length-sorted
micro-batches, through the head's `ServingSignature` (what its export answers, decoded
the same way). Long texts are read in the model's windows when it has a `doc_stride`;
otherwise each truncated row says so (`truncated_pieces`), counted from the very
pieces the model is given.

A head whose signature only packs its texts (classifier, regression, reranker,
embedder) has each chunk tokenized in one call: its rows are then sorted by their
packed length and each batch of ids packed and run; heads that map answers back to the
text (span, tagger, fill-mask) or pack choices run their signature on the batch's
texts. The batching is `RowPredictor`'s, which `saved_model.SavedModelPredictor` shares."""

import numpy as np
import tensorflow as tf

from bert_keras.models.encoder import BertEncoder
from bert_keras.serving.batch.records import head_kind, records
from bert_keras.serving.export import BYTES_PER_TOKEN, bounded_preprocessor, serving_preprocessor
from bert_keras.serving.serving_tasks import serving_signature, trained_inputs
from bert_keras.tasks.checkpoint_models import load_model as load_checkpoint_model
from bert_keras.tasks.serving_signature import ServingSignature
from bert_keras.tasks.task import with_windows
from bert_keras.tasks.text_embedder import BertTextEmbedder
from bert_keras.tasks.windowing import truncation_notice
from bert_keras.text.packer import BertPacker
from bert_keras.text.preprocessor import BertPreprocessor

RUN_ERRORS = (tf.errors.InvalidArgumentError, ValueError)
TOKENIZE_ROWS = 1024  # rows a tokenizer call: bounds its scratch memory when texts are long


def load_model(path):
    """The model to predict with from `path` (`checkpoint_models.load_model`, as every
    command loads one): a checkpoint of no task head (a bare encoder, a
    sentence-transformers folder) is an embedder; a `.keras` encoder has no head."""
    model = load_checkpoint_model(path, headless=BertTextEmbedder)
    if isinstance(model, BertEncoder):
        raise ValueError(f"{path} holds a {type(model).__name__}, which has no task head to predict with")
    return model


class CountingPacker(BertPacker):
    """A `BertPacker` that keeps, as `cut`, the pieces its last `pack` cut from each row
    (traced with it, so a graph returns both from one tokenization)."""

    def pack(self, segments, seq_length):
        self.cut = self.truncated_pieces(segments, seq_length)
        return super().pack(segments, seq_length)


def row_preprocessor(model, max_seq_length=None, bounded=True):
    """The model's serving preprocessor as predict packs rows: to each batch's longest row
    (batches are sorted by length; rounding up would only add padding), with a
    `CountingPacker`; `bounded`, a text is read only as far as the packed length reaches."""
    preprocessor = serving_preprocessor(model, max_seq_length=max_seq_length)
    if bounded:
        preprocessor = bounded_preprocessor(preprocessor)
    config = {**preprocessor.get_config(), "tokenizer": preprocessor.tokenizer, "pad_to_multiple_of": 1}
    preprocessor = BertPreprocessor.from_config(config)
    preprocessor.packer = CountingPacker.from_config(preprocessor.packer.get_config())
    return preprocessor


class RowPredictor:
    """Rows answered as records (`records.py`) in length-sorted batches: the interface
    `predict_files`, Beam and ranking use (`kind`, `segments`, `choices`, `labels`,
    `predict_rows`, `truncation_notice`). `run(*columns)` answers one batch's text
    columns (one `[batch]` string tensor a segment) with (outputs, the pieces cut from
    each row or None)."""

    def __init__(self, kind, segments, labels, run, batch_size=32, all_scores=False):
        self.kind, self.segments, self.labels = kind, tuple(segments), labels
        self.choices = kind == "multiple-choice"  # the last segment holds a list of choices a row
        self.batch_size, self.all_scores = batch_size, all_scores
        self._run = run

    def predict_rows(self, rows, on_error="raise"):
        """The records of `rows` (`readers.Row`), in their order; a bad row raises
        ValueError, or with `on_error="skip"` gets a record with its `error`."""
        results = [None] * len(rows)
        for index, row in enumerate(rows):
            if row.error is not None:
                if on_error == "raise":
                    raise ValueError(row.error)
                results[index] = {"id": row.id, "error": row.error}
        valid = [i for i in range(len(rows)) if results[i] is None]
        tokens = self._chunk_tokens(rows) if valid else None
        lengths = tokens[2] if tokens is not None else [_length_in_characters(row) if row.texts else 0 for row in rows]
        for batch in self._batches(rows, valid, lengths):
            for index, record in zip(batch, self._batch_records(rows, batch, on_error, tokens)):
                results[index] = record
        return results

    def _chunk_tokens(self, rows):
        """One tokenization of a chunk's rows for its batches to share; None: each batch
        runs on its texts."""
        return None

    def _batches(self, rows, indices, lengths):
        """`indices` of `rows` sorted by length in batches (of one number of choices each)."""
        count = (lambda i: len(rows[i].texts[self.segments[-1]])) if self.choices else (lambda i: 0)
        ordered = sorted(indices, key=lambda i: (count(i), lengths[i]))
        batch = []
        for index in ordered:
            if batch and (len(batch) == self.batch_size or count(batch[0]) != count(index)):
                yield batch
                batch = []
            batch.append(index)
        if batch:
            yield batch

    def _batch_records(self, rows, batch, on_error, tokens=None):
        """The records of the rows `batch` of `rows`; a batch that fails runs again a row
        at a time when errors are skipped, so only the bad row's record is an error."""
        texts = [rows[i].texts for i in batch]
        try:
            outputs, cut = self._outputs(texts, batch, tokens)
        except RUN_ERRORS as error:
            if on_error == "raise" or len(batch) == 1:
                message = f"{rows[batch[0]].id}: {str(error).splitlines()[0]}" if len(batch) == 1 else str(error)
                if on_error == "raise":
                    raise ValueError(message) from None
                return [{"id": rows[batch[0]].id, "error": message}]
            return [record for index in batch for record in self._batch_records(rows, [index], on_error, tokens)]
        answers = records(self.kind, outputs, texts, self.labels, self.all_scores)
        return [
            {"id": rows[index].id, **answer, **({"truncated_pieces": int(pieces)} if pieces else {})}
            for index, answer, pieces in zip(batch, answers, cut)
        ]

    def _outputs(self, texts, batch, tokens):
        """(numpy outputs, pieces truncation cut from each row: its choices' summed)."""
        columns = tuple([text[segment] for text in texts] for segment in self.segments)
        outputs, cut = self._run(*map(tf.constant, columns))
        cut = np.zeros(len(texts), np.int64) if cut is None else cut.numpy().reshape(len(texts), -1).sum(axis=1)
        return {key: value.numpy() for key, value in outputs.items()}, cut

    def truncation_notice(self, dropped):
        """The run's line on truncation, from the pieces each row lost (`dropped`); None: none cut."""
        raise NotImplementedError


class BatchPredictor(RowPredictor):
    """`model` answering batches of rows as records, padded per batch."""

    def __init__(self, model, batch_size=32, all_scores=False, max_seq_length=None, doc_stride=None, top_k=5):
        if doc_stride is not None:
            model = with_windows(model, doc_stride=doc_stride)
        self.model = model
        kind = head_kind(model)
        self.windows = getattr(model, "doc_stride", None) is not None
        # Without windows a 10 MB line is read only as far as the packed length can reach.
        self.preprocessor = row_preprocessor(model, max_seq_length, bounded=not self.windows)
        trained_segments, labels = trained_inputs(model)
        labelled = kind in ("classifier", "multi-label", "tagger") and labels is not None
        signature = serving_signature(model, self.preprocessor, labels=labels if labelled else None, top_k=top_k)
        segments = tuple(trained_segments or signature.segments)
        spec = signature.text_inputs(segments)
        packer = self.preprocessor.packer
        run = tf.function(
            lambda *texts: (signature.from_text(texts, signature.run), None if self.windows else packer.cut),
            input_signature=spec,
        )
        super().__init__(kind, segments, labels, run, batch_size, all_scores)
        self._tokenize = None
        if not self.windows and type(signature).from_text is ServingSignature.from_text:
            tokenizer = self.preprocessor.tokenizer
            self._tokenize = tf.function(lambda *texts: _tokens(tokenizer, packer, texts), input_signature=spec)
            ids = [tf.RaggedTensorSpec([None, None], tf.int32, 1, tf.int64)] * len(segments)
            self._run_ids = tf.function(
                lambda ids, rows: signature.from_ids(packer([tf.gather(t, rows) for t in ids]), signature.run),
                input_signature=[ids, tf.TensorSpec([None], tf.int64)],
            )

    def _chunk_tokens(self, rows):
        """(ids of each segment, pieces cut, packed lengths) of every row of a chunk, from
        one tokenization, `TOKENIZE_ROWS` at a time (rows in error as empty texts); None
        for a head run on texts."""
        if self._tokenize is None:
            return None
        columns = [[row.texts[segment] if row.texts else "" for row in rows] for segment in self.segments]
        try:
            parts = [
                self._tokenize(*(tf.constant(column[start : start + TOKENIZE_ROWS]) for column in columns))
                for start in range(0, len(rows), TOKENIZE_ROWS)
            ]
        except RUN_ERRORS:
            return None  # each batch's own run then names the row that fails
        ids = [tf.concat([part[0][index] for part in parts], axis=0) for index in range(len(self.segments))]
        return ids, *(np.concatenate([part[index].numpy() for part in parts]) for index in (1, 2))

    def _outputs(self, texts, batch, tokens):
        if tokens is None:
            return super()._outputs(texts, batch, tokens)
        ids, cut, _ = tokens
        outputs = self._run_ids(ids, tf.constant(batch, tf.int64))
        return {key: value.numpy() for key, value in outputs.items()}, cut[batch]

    def truncation_notice(self, dropped):
        """The run's line on truncation, from the pieces each row lost (`dropped`); None: none cut."""
        notice = truncation_notice(self.preprocessor, None, "rows", dropped=dropped)
        if notice and not self.windows:
            notice += (
                f"; texts are read only as far as that length can reach ({BYTES_PER_TOKEN} bytes a token), "
                "so a longer text's count is a lower bound"
            )
        return notice


def _tokens(tokenizer, packer, texts):
    """Each segment's ids, the pieces packing cuts from each row and its packed length."""
    ids = [tokenizer(text) for text in texts]
    lengths = tf.stack([segment.row_lengths() for segment in ids], axis=1)
    cut = packer.truncated_pieces(ids)
    return ids, cut, tf.reduce_sum(lengths, axis=1) - cut


def _length_in_characters(row):
    return sum(len(text) if isinstance(text, str) else sum(map(len, text)) for text in row.texts.values())
