"""Feature-based use of BERT: fixed contextual features from chosen layers.

The paper's feature-based NER experiment feeds the last four layers (concatenated,
or summed) to a separate model instead of fine-tuning; sentence vectors are the [CLS]
feature or the mean over the real tokens (as sentence-transformers models such as
all-MiniLM-L6-v2 are trained to use).
"""

import keras
import tensorflow as tf

from bert_keras.tasks.serving_signature import ServingSignature, check_no_labels
from bert_keras.tasks.task import BertTask

COMBINE = ("concat", "sum", "mean", "stack")
POOLING = ("cls", "mean", "pooler")


@keras.saving.register_keras_serializable(package="bert_keras")
class BertFeatureExtractor(BertTask):
    """Token features from chosen encoder layers and a pooled sentence vector.

    Args:
        encoder: a `BertEncoder`.
        layers: indices into the encoder's layer outputs, as the original
            extract_features.py: -1 is the last Transformer layer, 0 the first.
        combine: "concat" (`[B, L, len(layers) * H]`), "sum" or "mean" (`[B, L, H]`),
            or "stack" (`[B, L, len(layers), H]`, one slice per layer).
        pooling: sentence vector from the combined features: "cls" (position 0),
            "mean" (over positions where `input_mask` is 1), or "pooler" (the encoder's
            `pooled_output`, `[B, H]`, regardless of `layers`).
        preprocessor: optional `BertPreprocessor` so `predict` takes raw text.

    Call: packed dict of int `[B, L]` -> dict with float `token_features` (shape by
    `combine`), `sentence_features` (the same without the L axis) and `input_mask`.
    """

    token_output_names = ("token_features", "input_mask")

    def __init__(self, encoder, layers=(-1, -2, -3, -4), combine="concat", pooling="mean", preprocessor=None, **kwargs):
        super().__init__(encoder, preprocessor, **kwargs)
        num_layers = encoder.config.num_hidden_layers
        layers = [int(layer) for layer in layers]
        if not layers or any(not -num_layers <= layer < num_layers for layer in layers):
            raise ValueError(f"layers must be indices in [-{num_layers}, {num_layers - 1}], got {layers}")
        if combine not in COMBINE:
            raise ValueError(f"combine must be one of {COMBINE}, got {combine!r}")
        if pooling not in POOLING:
            raise ValueError(f"pooling must be one of {POOLING}, got {pooling!r}")
        self.layer_indices = layers
        self.combine = combine
        self.pooling = pooling
        self.built = True

    def call(self, inputs, training=None):
        outputs = self._encode(inputs, training)
        chosen = [outputs["encoder_outputs"][layer] for layer in self.layer_indices]
        if self.combine == "concat":
            tokens = tf.concat(chosen, axis=-1)
        elif self.combine == "stack":
            tokens = tf.stack(chosen, axis=2)
        else:
            tokens = tf.add_n(chosen)
            if self.combine == "mean":
                tokens = tokens / len(chosen)
        mask = tf.cast(inputs["input_mask"], tokens.dtype)
        if self.pooling == "pooler":
            sentence = outputs["pooled_output"]
        elif self.pooling == "cls":
            sentence = tokens[:, 0]
        else:
            weights = tf.reshape(mask, tf.concat([tf.shape(mask), tf.ones([tokens.shape.rank - 2], tf.int32)], 0))
            sentence = tf.reduce_sum(tokens * weights, axis=1) / tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)
        return {"token_features": tokens, "sentence_features": sentence, "input_mask": inputs["input_mask"]}

    def serving_signature(self, preprocessor, labels=None):
        """Served: the call's outputs, `token_features`, `sentence_features` and `input_mask`."""
        check_no_labels(self, labels)
        return ServingSignature(self, preprocessor)

    def get_config(self):
        return {**super().get_config(), "layers": self.layer_indices, "combine": self.combine, "pooling": self.pooling}
