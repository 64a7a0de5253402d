"""A model answering batches of rows as records: each chunk sorted by length into
batches padded only to their own longest text, as the server's length-sorted
micro-batches, through the head's `ServingSignature` (what its export answers, decoded
the same way). Long texts are read in the model's windows when it has a `doc_stride`;
otherwise each truncated row says so (`truncated_pieces`)."""

from pathlib import Path

import tensorflow as tf

from bert_keras.checkpoint import read_checkpoint
from bert_keras.checkpoint.sentence_transformers import ST_MODULES
from bert_keras.models.encoder import BertEncoder
from bert_keras.serving.batch.records import head_kind, records
from bert_keras.serving.export import BYTES_PER_TOKEN, bounded_preprocessor, serving_preprocessor, trained_inputs
from bert_keras.serving.serving_tasks import serving_signature
from bert_keras.tasks.checkpoint_models import load_model as load_checkpoint_model
from bert_keras.tasks.checkpoint_models import model_class
from bert_keras.tasks.task import with_windows
from bert_keras.tasks.text_embedder import BertTextEmbedder
from bert_keras.tasks.windowing import truncated_pieces, truncation_notice


def load_model(path):
    """The model to predict with from `path`: a task or pre-training `.keras` file, or a
    checkpoint folder's model as `bert-keras convert` picks it (HF BertFor*, a CrossEncoder:
    a reranker, BertForMaskedLM: fill-mask); a sentence-transformers folder or a bare
    encoder checkpoint is an embedder."""
    try:
        found = read_checkpoint(path)
    except FileNotFoundError as error:
        raise ValueError(f"{path} is not a model (.keras file or checkpoint folder): {error}") from None
    if found.format != "keras" and model_class(found) is BertEncoder:
        # A sentence-transformers folder whose modules this read passed over is read again
        # by the embedder's own strict reader, which names what it cannot run.
        unread = found.embedding is None and (Path(path) / ST_MODULES).is_file()
        return BertTextEmbedder.from_checkpoint(path if unread else found)
    model = load_checkpoint_model(found)
    if isinstance(model, BertEncoder):
        raise ValueError(f"{path} holds a {type(model).__name__}, which has no task head to predict with")
    return model


class BatchPredictor:
    """`model` answering batches of rows as records (`records.py`), padded per batch."""

    def __init__(self, model, batch_size=32, all_scores=False, max_seq_length=None, doc_stride=None, top_k=5):
        if doc_stride is not None:
            model = with_windows(model, doc_stride=doc_stride)
        self.kind = head_kind(model)
        self.batch_size, self.all_scores = batch_size, all_scores
        self.windows = getattr(model, "doc_stride", None) is not None
        self.preprocessor = serving_preprocessor(model, max_seq_length=max_seq_length)
        if not self.windows:  # a 10 MB line is read only as far as the packed length can reach
            self.preprocessor = bounded_preprocessor(self.preprocessor)
        trained_segments, self.labels = trained_inputs(model)
        labels = self.labels if self._labelled(model) else None
        signature = serving_signature(model, self.preprocessor, labels=labels, top_k=top_k)
        self.segments = tuple(trained_segments or signature.segments)
        self.choices = self.kind == "multiple-choice"  # the last segment holds a list of choices a row
        spec = signature.text_inputs(self.segments)
        self._run = tf.function(lambda *texts: signature.from_text(texts, signature.run), input_signature=spec)

    def _labelled(self, model):
        return self.kind in ("classifier", "multi-label", "tagger") and self.labels is not None

    def predict_rows(self, rows, on_error="raise"):
        """The records of `rows` (`readers.Row`), in their order; a bad row raises
        ValueError, or with `on_error="skip"` gets a record with its `error`."""
        results = [None] * len(rows)
        for index, row in enumerate(rows):
            if row.error is not None:
                if on_error == "raise":
                    raise ValueError(row.error)
                results[index] = {"id": row.id, "error": row.error}
        for batch in self._batches(rows, [i for i in range(len(rows)) if results[i] is None]):
            for index, record in zip(batch, self._batch_records([rows[i] for i in batch], on_error)):
                results[index] = record
        return results

    def _batches(self, rows, indices):
        """`indices` of `rows` sorted by length in batches (of one number of choices each)."""
        count = (lambda i: len(rows[i].texts[self.segments[-1]])) if self.choices else (lambda i: 0)
        ordered = sorted(indices, key=lambda i: (count(i), _length(rows[i])))
        batch = []
        for index in ordered:
            if batch and (len(batch) == self.batch_size or count(batch[0]) != count(index)):
                yield batch
                batch = []
            batch.append(index)
        if batch:
            yield batch

    def _batch_records(self, rows, on_error):
        texts = [row.texts for row in rows]
        columns = tuple([text[segment] for text in texts] for segment in self.segments)
        try:
            outputs = {key: value.numpy() for key, value in self._run(*map(tf.constant, columns)).items()}
        except (tf.errors.InvalidArgumentError, ValueError) as error:
            if on_error == "raise" or len(rows) == 1:
                message = f"{rows[0].id}: {str(error).splitlines()[0]}" if len(rows) == 1 else str(error)
                if on_error == "raise":
                    raise ValueError(message) from None
                return [{"id": rows[0].id, "error": message}]
            return [record for row in rows for record in self._batch_records([row], on_error)]
        answers = records(self.kind, outputs, texts, self.labels, self.all_scores)
        dropped = [0] * len(rows) if self.windows else self._truncated(columns)
        return [
            {"id": row.id, **answer, **({"truncated_pieces": int(cut)} if cut else {})}
            for row, answer, cut in zip(rows, answers, dropped)
        ]

    def truncation_notice(self, dropped):
        """The run's line on truncation, from the pieces each row lost (`dropped`); None: none cut."""
        notice = truncation_notice(self.preprocessor, None, "rows", dropped=dropped)
        if notice and not self.windows:
            notice += (
                f"; texts are read only as far as that length can reach ({BYTES_PER_TOKEN} bytes a token), "
                "so a longer text's count is a lower bound"
            )
        return notice

    def _truncated(self, columns):
        """The pieces truncation cuts from each row (its choices' summed)."""
        if not self.choices:
            return truncated_pieces(self.preprocessor, columns)
        count = len(columns[-1][0])
        flat = tuple(
            [text for text in column for text in ([text] * count if isinstance(text, str) else text)]
            for column in columns
        )
        return truncated_pieces(self.preprocessor, flat).reshape(-1, count).sum(axis=1)


def _length(row):
    return sum(len(text) if isinstance(text, str) else sum(map(len, text)) for text in row.texts.values())
