"""Sentence embeddings: one vector per text for semantic search, clustering and
deduplication, as sentence-transformers computes them (all-MiniLM-L6-v2 and the like).

`BertTextEmbedder` is the encoder, a pooling of the last layer over the real tokens and
an optional L2 normalisation. It reads and writes sentence-transformers folders, trains
through `model.fit` on (anchor, positive[, negative]) columns with in-batch negatives or
on scored pairs with CoSENT (`bert_keras.training.contrastive`), and exports raw strings
-> vectors.
"""

from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bert_keras.checkpoint.reader import read_checkpoint
from bert_keras.checkpoint.sentence_transformers import ST_POOLING_MODES, write_sentence_transformers
from bert_keras.checkpoint.text_files import VOCAB, write_vocab
from bert_keras.models.saving import save_checkpoint
from bert_keras.tasks.head_loading import checkpoint_preprocessor, load_encoder, with_arguments
from bert_keras.tasks.preprocessing import is_packed
from bert_keras.tasks.serving_signature import ServingSignature, check_no_labels
from bert_keras.tasks.task import BertTask, default_optimizer
from bert_keras.tasks.windowing import encode_windows, is_windowed, pool_windows, window_arguments
from bert_keras.training.contrastive import MultipleNegativesRankingLoss, text_fingerprints
from bert_keras.training.progress import progress_bar

POOLING = tuple(ST_POOLING_MODES)
# The settings of an embedder from a checkpoint that is no sentence-transformers folder.
NOT_SENTENCE_TRANSFORMERS = {
    "pooling": "mean",
    "normalize": True,
    "max_seq_length": None,
    "lower_case": None,
    "prompts": {},
}
# Named columns of a dict of texts, in the order the losses read them.
COLUMNS = ("anchor", "positive", "negative", "text_a", "text_b")


def _column_list(x):
    """Text columns as a list: a tuple/list as given, a dict in `COLUMNS` order."""
    if isinstance(x, dict):
        unknown = sorted(set(x) - set(COLUMNS))
        if unknown:
            raise ValueError(f"text columns {unknown} are not among {list(COLUMNS)}")
        return [x[name] for name in COLUMNS if name in x]
    return list(x)


@keras.saving.register_keras_serializable(package="bert_keras")
class BertTextEmbedder(BertTask):
    """Encoder + pooling + optional L2 normalisation: one float32 vector per text.

    Args:
        encoder: a `BertEncoder`.
        pooling: over the last layer's real tokens (`input_mask` 1), as
            sentence-transformers' Pooling: "mean", "cls" (position 0), "max", or
            "mean_sqrt_len" (the sum divided by the square root of the length).
        normalize: L2-normalise the vectors (sentence-transformers' Normalize).
        query_prefix, document_prefix: text put before queries / documents by
            `encode_queries` / `encode_documents`, and before the first / other columns
            in `fit` (e5-style "query: " / "passage: "); None for none.
        preprocessor: a `BertPreprocessor` for raw text.
        doc_stride: None truncates long texts; a number embeds them in windows (of the
            preprocessor's length, each `doc_stride` pieces after the last): the vector
            is the average of the windows' vectors weighted by their tokens, then
            normalised.
        max_windows: the most windows a text may have (None: no bound).
        window_micro_batch: the most windows the encoder runs at once: a training step's
            memory is then set by it, whatever the documents' lengths, for the same
            gradient (recomputed in the backward pass). None: in training, each
            document's first window at once and the others as many as the batch's
            documents at a time (`windowing.encode_windows`); "all": every window at once.

    The encoder's pooler, which the vectors do not use, is frozen.

    Call: a packed dict -> `[B, H]`; a tuple of packed dicts (text columns) -> `[B,
    columns, H]`, what the losses take. `fit` takes raw columns `(anchors, positives[,
    negatives])` (or a dict with `anchor`, `positive`, `negative` / `text_a`, `text_b`)
    with no `y` for `MultipleNegativesRankingLoss` (the default), or scores as `y` with
    `CoSENTLoss`.
    """

    head_kind = "embedder"
    window_argument_names = ("doc_stride", "max_windows", "window_micro_batch")

    def __init__(
        self,
        encoder,
        pooling="mean",
        normalize=True,
        query_prefix=None,
        document_prefix=None,
        preprocessor=None,
        doc_stride=None,
        max_windows=None,
        window_micro_batch=None,
        **kwargs,
    ):
        # One text a vector, whatever the columns it was trained on.
        super().__init__(encoder, preprocessor, segments=("text",), **kwargs)
        self.doc_stride, self.max_windows, self.window_micro_batch = window_arguments(
            doc_stride, max_windows, window_micro_batch
        )
        if pooling not in POOLING:
            raise ValueError(f"pooling must be one of {POOLING}, got {pooling!r}")
        self.pooling = pooling
        self.normalize = bool(normalize)
        self.query_prefix = query_prefix or None
        self.document_prefix = document_prefix or None
        # The vectors do not use the pooler: it gets no gradient (and Keras would warn of it).
        encoder.pooler.trainable = False
        self.built = True

    # --- the vectors ---------------------------------------------------------------

    def embed(self, packed, training=None):
        """Packed inputs -> float32 vectors `[B, H]` (of windowed inputs `[B, W, L]`: each
        text's windows' vectors averaged, weighted by their tokens)."""
        if is_packed(packed) and is_windowed(packed):
            outputs, windows = encode_windows(
                self.encoder, packed, training, outputs=("sequence_output",), micro_batch=self.window_micro_batch
            )
            vectors = self._pooled(outputs["sequence_output"], packed["input_mask"])
            weights = tf.reduce_sum(packed["input_mask"], axis=-1)
            vectors = pool_windows(vectors, windows, "mean", weights)
        else:
            vectors = self._pooled(self._encode(packed, training)["sequence_output"], packed["input_mask"])
        if self.normalize:
            vectors = tf.math.l2_normalize(vectors, axis=-1, epsilon=1e-24)
        return vectors

    def _pooled(self, tokens, input_mask):
        """Token vectors `[..., L, H]` -> `[..., H]` over the real tokens."""
        tokens = tf.cast(tokens, tf.float32)
        mask = tf.expand_dims(tf.cast(input_mask, tf.float32), -1)  # LiteRT: no new-axis slices
        if self.pooling == "cls":
            return tokens[..., 0, :]
        if self.pooling == "max":
            return tf.reduce_max(tf.where(mask > 0, tokens, -1e9), axis=-2)
        total, count = tf.reduce_sum(tokens * mask, axis=-2), tf.maximum(tf.reduce_sum(mask, axis=-2), 1e-9)
        return total / (count if self.pooling == "mean" else tf.sqrt(count))

    def call(self, inputs, training=None):
        if is_packed(inputs):
            return self.embed(inputs, training)
        return tf.stack([self.embed(column, training) for column in _column_list(inputs)], axis=1)

    def compile(self, optimizer="auto", loss="auto", metrics=None, **kwargs):
        """Defaults: AdamW 2e-5 (sentence-transformers' rate) and in-batch negatives."""
        if optimizer == "auto":
            optimizer = default_optimizer(2e-5)
        if loss == "auto":
            loss = MultipleNegativesRankingLoss()
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    # --- raw text ------------------------------------------------------------------

    def text_segments(self, x, record=False):
        return self.segments  # each column is embedded alone: the vector is of one text

    def preprocess_samples(self, x, y=None, sample_weight=None):
        """One text column -> packed; several -> a tuple of packed columns, with the
        prefixes, and as `y` their `text_fingerprints` unless scores are given."""
        if not isinstance(x, (tuple, list, dict)):
            return keras.utils.pack_x_y_sample_weight(self.pack_text(x), y, sample_weight)
        columns = [
            self._prefixed(column, self.query_prefix if i == 0 else self.document_prefix)
            for i, column in enumerate(_column_list(x))
        ]
        if y is None:
            y = text_fingerprints(columns)
        return keras.utils.pack_x_y_sample_weight(tuple(self.pack_text(c) for c in columns), y, sample_weight)

    @staticmethod
    def _prefixed(texts, prefix):
        return texts if not prefix else tf.strings.join([prefix, texts])

    def encode(self, texts, batch_size=32, verbose=0, prefix=None):
        """Vectors `[len(texts), H]` (numpy float32) of a list of strings, computed in
        batches of similar lengths (longest first) and returned in the input order;
        `verbose=1` shows a progress bar (plain lines where stdout is not a terminal)."""
        texts = [prefix + text for text in texts] if prefix else list(texts)
        if not texts:
            return np.zeros((0, self.encoder.config.hidden_size), np.float32)
        if self.preprocessor is None:
            raise ValueError("BertTextEmbedder.encode needs a preprocessor for raw text")
        order = np.argsort([-len(text) for text in texts], kind="stable")
        if getattr(self, "_embed_function", None) is None:
            # One graph from strings to vectors for every batch (Keras' predict traces again
            # for new lengths, and a tf.data pipeline competes for the cores).
            self._embed_function = tf.function(
                lambda strings: self.embed(self.pack_text(strings), training=False),
                input_signature=[tf.TensorSpec([None], tf.string)],
            )
        progress = progress_bar(len(texts), unit_name="text", verbose=verbose) if verbose else None
        parts = []
        for start in range(0, len(texts), batch_size):
            batch = tf.constant([texts[i] for i in order[start : start + batch_size]])
            parts.append(self._embed_function(batch).numpy())
            if progress:
                progress.add(len(parts[-1]))
        vectors = np.empty((len(texts), self.encoder.config.hidden_size), np.float32)
        vectors[order] = np.concatenate(parts)
        return vectors

    def encode_queries(self, texts, **kwargs):
        """`encode` with `query_prefix`."""
        return self.encode(texts, prefix=self.query_prefix, **kwargs)

    def encode_documents(self, texts, **kwargs):
        """`encode` with `document_prefix`."""
        return self.encode(texts, prefix=self.document_prefix, **kwargs)

    # --- serving ---------------------------------------------------------------------

    def serving_signature(self, preprocessor, labels=None):
        """Served: `embeddings` float32 `[batch, H]` of each text as given (no prefix)."""
        check_no_labels(self, labels)
        return EmbedderSignature(self, preprocessor)

    # --- configuration and checkpoints ------------------------------------------------

    def get_config(self):
        config = super().get_config()
        config.pop("segments")
        return {
            **config,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "query_prefix": self.query_prefix,
            "document_prefix": self.document_prefix,
            "doc_stride": self.doc_stride,
            "max_windows": self.max_windows,
            "window_micro_batch": self.window_micro_batch,
        }

    @classmethod
    def from_checkpoint(
        cls,
        path,
        preprocessor=True,
        vocab=None,
        lower_case=None,
        seq_length=None,
        max_seq_length=None,
        encoder_config=None,
        pooling=None,
        normalize=None,
        query_prefix=None,
        document_prefix=None,
        revision=None,
        **kwargs,
    ):
        """An embedder from a sentence-transformers folder (its pooling, normalisation,
        `max_seq_length`, lower-casing and query/document prompts) or from any encoder
        checkpoint (mean pooling and normalisation unless given, up to 512 tokens).
        Arguments given override the folder's settings. Texts are padded to the longest
        in each batch (`seq_length=None`), as sentence-transformers does. A `.keras`
        file of an embedder is loaded as saved. `path` may be a Hugging Face Hub name
        (`ORG/NAME[@REVISION]`; `revision` pins a branch, tag or commit)."""
        found = read_checkpoint(path, sentence_transformers=True, revision=revision)
        encoder = load_encoder(found, cls, encoder_config)
        if isinstance(encoder, cls):  # a .keras file of an embedder, as saved but for its windows
            return with_arguments(encoder, {k: v for k, v in kwargs.items() if k in cls.window_argument_names})
        settings = found.embedding or NOT_SENTENCE_TRANSFORMERS
        preprocessor = checkpoint_preprocessor(
            encoder,
            found,
            preprocessor,
            vocab,
            settings["lower_case"] if lower_case is None else lower_case,
            seq_length=seq_length,
            max_seq_length=max_seq_length or settings["max_seq_length"],
        )
        prompts = settings["prompts"]
        return cls(
            encoder,
            pooling=pooling or settings["pooling"],
            normalize=settings["normalize"] if normalize is None else normalize,
            query_prefix=query_prefix if query_prefix is not None else prompts.get("query"),
            document_prefix=document_prefix if document_prefix is not None else prompts.get("document"),
            preprocessor=preprocessor,
            **kwargs,
        )

    def checkpoint_head(self):
        """What a keras-hub `BertTextEmbedder` preset records (`format="keras-hub"`)."""
        prompts = {"query": self.query_prefix, "document": self.document_prefix}
        return {
            "architecture": "BertTextEmbedder",
            "pooling": self.pooling,
            "normalize": self.normalize,
            "prompts": prompts,
        }

    def save_checkpoint(self, path, format="hf"):
        """Writes a sentence-transformers folder (Hugging Face weights, vocab, pooling,
        normalisation, max length, prompts) that `SentenceTransformer(path)` loads and
        `from_checkpoint` reads back; `format="tf1"` writes the encoder alone,
        `format="keras-hub"` a keras-hub `BertTextEmbedder` preset."""
        if format != "hf":
            return super().save_checkpoint(path, format)
        if self.preprocessor is None:
            raise ValueError(
                "save_checkpoint writes the tokenizer's vocabulary: build the embedder with a preprocessor"
            )
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tokenizer = self.preprocessor.tokenizer
        vocab_path = write_vocab(tokenizer.vocabulary, path / VOCAB)
        save_checkpoint(self.encoder, path, "hf", vocab_path=vocab_path)
        write_sentence_transformers(
            path,
            self.pooling,
            self.normalize,
            self.preprocessor.packer.max_seq_length,
            tokenizer.lower_case,
            self.encoder.config.hidden_size,
            {"query": self.query_prefix, "document": self.document_prefix},
        )


class EmbedderSignature(ServingSignature):
    def from_ids(self, packed, run):
        return {"embeddings": run(packed)}
