"""The paper's feature-based tagger: a frozen encoder's chosen layers, combined, into a
two-layer bidirectional LSTM, then the fine-tuning tagger's tag layer.

The encoder is never trained, so its features can be computed once and the task model
(`FeatureBiLSTM`) trained on them for many epochs (`bert_keras.recipes.feature_based`);
the whole `BertFeatureTagger` (encoder + head) is what is saved and tags raw text. Labels
and predictions are the `BertTokenClassifier`'s: each word's tag at its first piece.
"""

import keras
import tensorflow as tf

from bert_keras.tasks.task import BertTask, output_layer
from bert_keras.tasks.token_classifier import BertTokenClassifier, document_logits

EMBEDDINGS = "embeddings"
COMBINE = ("concat", "sum", "weighted")


def hidden_state_indices(layers, num_layers):
    """`layers` (Transformer layer indices as the feature extractor's, -1 the last and 0
    the first, or "embeddings" for the embedding layer's output) -> indices into
    `[embeddings, layer 1, ..., layer N]`; an empty, unknown or out-of-range entry is a
    `ValueError` naming it."""
    layers = list(layers)
    if not layers:
        raise ValueError(
            f"feature layers: none given; name indices in [-{num_layers}, {num_layers - 1}] or 'embeddings'"
        )
    indices = []
    for layer in layers:
        if layer == EMBEDDINGS:
            indices.append(0)
            continue
        try:
            index = int(layer)
        except (TypeError, ValueError):
            raise ValueError(f"feature layer {layer!r} is not an integer or 'embeddings'") from None
        if not -num_layers <= index < num_layers:
            raise ValueError(
                f"feature layer {index} is out of range: the encoder has {num_layers} layers, "
                f"indices [-{num_layers}, {num_layers - 1}] (-1 the last, 0 the first)"
            )
        indices.append(index % num_layers + 1)
    if len(set(indices)) != len(indices):
        raise ValueError(f"feature layers {layers} name a layer twice")
    return indices


@keras.saving.register_keras_serializable(package="bert_keras")
class LayerMix(keras.layers.Layer):
    """Stacked layer features `[B, L, n, H]` -> `[B, L, n * H]` ("concat"), their sum
    `[B, L, H]` ("sum"), or ELMo's scalar mix ("weighted": gamma times a softmax-weighted
    sum, both learnt, starting as the mean)."""

    def __init__(self, combine="concat", **kwargs):
        super().__init__(**kwargs)
        if combine not in COMBINE:
            raise ValueError(f"combine must be one of {COMBINE}, got {combine!r}")
        self.combine = combine

    def build(self, input_shape):
        if self.combine == "weighted":
            self.layer_weights = self.add_weight(shape=(input_shape[-2],), initializer="zeros", name="layer_weights")
            self.gamma = self.add_weight(shape=(), initializer="ones", name="gamma")

    def call(self, stacked):
        if self.combine == "concat":
            shape = tf.shape(stacked)
            return tf.reshape(stacked, tf.concat([shape[:2], [stacked.shape[-2] * stacked.shape[-1]]], 0))
        if self.combine == "sum":
            return tf.reduce_sum(stacked, axis=2)
        weights = tf.nn.softmax(self.layer_weights)
        return self.gamma * tf.einsum("blnh,n->blh", stacked, weights)

    def get_config(self):
        return {**super().get_config(), "combine": self.combine}


@keras.saving.register_keras_serializable(package="bert_keras")
class FeatureBiLSTM(keras.layers.Layer):
    """The task model's body on stacked features `[B, L, n, H]` and `input_mask` `[B, L]`:
    `LayerMix`, then `lstm_layers` bidirectional LSTMs of `lstm_units` a direction over the
    real tokens -> `[B, L, 2 * lstm_units]`."""

    def __init__(self, combine="concat", lstm_units=768, lstm_layers=2, **kwargs):
        super().__init__(**kwargs)
        if lstm_units < 1 or lstm_layers < 1:
            raise ValueError(f"lstm_units and lstm_layers must be positive, got {lstm_units} and {lstm_layers}")
        self.combine, self.lstm_units, self.lstm_layers = combine, int(lstm_units), int(lstm_layers)
        self.mix = LayerMix(combine, name="mix")
        self.lstms = [
            keras.layers.Bidirectional(
                keras.layers.LSTM(self.lstm_units, return_sequences=True, name=f"lstm_{i}"), name=f"bilstm_{i}"
            )
            for i in range(self.lstm_layers)
        ]

    def build(self, features_shape, mask_shape=None):
        num_layers, width = features_shape[-2], features_shape[-1]
        self.mix.build(features_shape)
        width = num_layers * width if self.combine == "concat" else width
        for lstm in self.lstms:
            lstm.build((None, None, width))
            width = 2 * self.lstm_units

    def call(self, features, input_mask, training=None):
        mask = tf.cast(input_mask, tf.bool)
        hidden = self.mix(features)
        for lstm in self.lstms:
            hidden = lstm(hidden, mask=mask, training=training)
        return hidden

    def get_config(self):
        config = {"combine": self.combine, "lstm_units": self.lstm_units, "lstm_layers": self.lstm_layers}
        return {**super().get_config(), **config}


@keras.saving.register_keras_serializable(package="bert_keras")
class BertFeatureTagger(BertTokenClassifier):
    """A `BertTokenClassifier` whose frozen encoder only gives features: the chosen
    `layers` (`hidden_state_indices`), combined by `combine`, go through a
    `FeatureBiLSTM` (the paper: two layers of 768 units a direction).

    Call: packed dict of int `[B, L]` -> float32 logits `[B, L, K]` (windows `[B, W, L]`
    as the classifier's, for `tag`). `features(packed)` gives the head's input, the
    chosen layers stacked `[B, L, n, H]`, which a training run computes once.
    """

    hf_architecture = None  # no transformers class holds this head
    window_argument_names = ()
    window_micro_batch = None  # the frozen encoder's windows are never trained

    def __init__(
        self,
        encoder,
        num_classes,
        layers=(-1, -2, -3, -4),
        combine="concat",
        lstm_units=768,
        lstm_layers=2,
        dropout=0.1,
        preprocessor=None,
        **kwargs,
    ):
        BertTask.__init__(self, encoder, preprocessor, **kwargs)
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        self.num_classes, self.dropout_rate = int(num_classes), float(dropout)
        self.hidden_states = hidden_state_indices(layers, encoder.config.num_hidden_layers)
        self.layer_names = [layer if layer == EMBEDDINGS else int(layer) for layer in layers]
        encoder.trainable = False
        self.bilstm = FeatureBiLSTM(combine, lstm_units, lstm_layers, name="bilstm")
        self.bilstm.build((None, None, len(self.hidden_states), encoder.config.hidden_size))
        self.dropout = keras.layers.Dropout(dropout)
        self.logits = output_layer(encoder, num_classes, "logits", per_token=True, width=2 * self.bilstm.lstm_units)
        self.built = True

    def features(self, inputs, hidden_states=None):
        """Packed `[B, L]` -> the frozen encoder's `hidden_states` (default: the model's;
        0 the embeddings, i layer i) stacked `[B, L, n, H]`."""
        hidden_states = self.hidden_states if hidden_states is None else hidden_states
        outputs = self._encode(inputs, training=False)["encoder_outputs"]
        if 0 in hidden_states:
            ids, types = inputs["input_word_ids"], inputs["input_type_ids"]
            outputs = [self.encoder.embeddings(ids, types, training=False), *outputs]
        else:
            outputs = [None, *outputs]
        return tf.stop_gradient(tf.stack([outputs[index] for index in hidden_states], axis=2))

    def call(self, inputs, training=None):
        if inputs["input_word_ids"].shape.rank == 3:
            raise ValueError("BertFeatureTagger takes packed [batch, seq] inputs; tag() reads long texts in windows")
        return self.tag_logits(self.features(inputs), inputs["input_mask"], training=training)

    def tag_logits(self, features, input_mask, training=None):
        """The trained part: `features` (`features(...)`'s) and `input_mask` -> logits `[B, L, K]`."""
        hidden = self.bilstm(features, input_mask, training=training)
        return self.logits(self.dropout(hidden, training=training))

    def windowed_logits(self, inputs, doc_stride, training=None):
        """Each window tagged on its own, then the documents' logits (`document_logits`)."""
        shape = tf.shape(inputs["input_word_ids"])
        flat = {name: tf.reshape(value, [-1, shape[2]]) for name, value in inputs.items()}
        logits = self.call(flat, training=training)
        return document_logits(tf.reshape(logits, tf.concat([shape, [self.num_classes]], 0)), inputs, doc_stride)

    def get_config(self):
        config = super().get_config()
        for name in ("doc_stride", "max_windows", "window_micro_batch"):
            config.pop(name)
        bilstm = self.bilstm
        config.update(layers=self.layer_names, combine=bilstm.combine, lstm_units=bilstm.lstm_units)
        return {**config, "lstm_layers": bilstm.lstm_layers}

    def head_weight_map(self):
        return []

    @classmethod
    def head_arguments(cls, weights, head):
        return None

    def checkpoint_head(self):
        return None


class CachedFeatureModel(keras.Model):
    """A `BertFeatureTagger`'s trained part on cached features: `{"features", "input_mask"}` -> logits."""

    def __init__(self, tagger, **kwargs):
        super().__init__(**kwargs)
        self.tagger = tagger

    def call(self, inputs, training=None):
        return self.tagger.tag_logits(inputs["features"], inputs["input_mask"], training=training)
