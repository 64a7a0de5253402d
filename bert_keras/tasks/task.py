"""What every task head shares: an encoder, an optional preprocessor for raw text,
and construction from any encoder checkpoint.

Raw strings cannot go through the train step (tf.text ops do not run under XLA or on
TPU), so, as keras-hub's `Task` does, `fit`/`evaluate`/`predict` turn raw inputs into a
`tf.data` pipeline that maps `preprocess_samples` over batches before the model sees
them. The model's own `call` only ever takes packed int inputs, which is what an
exported serving signature wraps.
"""

import keras
import tensorflow as tf

from bert_keras.compat import RestoresCompile
from bert_keras.models.encoder import INPUT_NAMES, BertEncoder
from bert_keras.tasks.preprocessing import holds_strings, is_packed, preprocessor_for, segments_to_tensors, to_tensors
from bert_keras.text.preprocessor import BertPreprocessor

DEFAULT_BATCH_SIZE = 32


def output_layer(encoder, units, name, per_token=False):
    """A head's new float32 Dense over the encoder's features (pooled, or every token's),
    built, with the original's truncated normal (stddev `initializer_range`, 0.02)."""
    layer = keras.layers.Dense(
        units,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.config.initializer_range),
        dtype="float32",
        name=name,
    )
    layer.build((None, None, encoder.config.hidden_size) if per_token else (None, encoder.config.hidden_size))
    return layer


def default_optimizer(learning_rate=5e-5):
    """The original fine-tuning AdamW (decay 0.01, none on LayerNorm and biases, global
    norm clipped to 1) at a constant rate; pipelines add warm-up and linear decay with
    `bert_keras.training.optimization.create_optimizer`, which needs the number of steps."""
    from bert_keras.training.optimization import AdamWeightDecay

    return AdamWeightDecay(learning_rate=learning_rate, weight_decay_rate=0.01, global_clipnorm=1.0)


class BertTask(RestoresCompile, keras.Model):
    """Base of the heads: holds `encoder` (a `BertEncoder`) and optional `preprocessor`
    (a `BertPreprocessor`) used by `fit`/`evaluate`/`predict` on raw text.

    `segments` are the names of the text inputs the model was trained on (e.g.
    `("text_a", "text_b")` for sentence pairs) and `labels` its class or tag names; both
    are saved with the model so that an export serves what was trained. Raw text sets
    `segments` the first time it is seen (see `text_segments`) and is checked against
    them afterwards: a pair model fed single texts is an error, not a wrong answer.
    A loaded `.keras` file comes back compiled with its saved settings (`RestoresCompile`:
    the heads' `compile` only fills defaults).

    Each head declares its inputs and outputs once, as class attributes read both by
    `fit` (the default names of raw text inputs) and by its `ServingSignature`:
    `text_input_names`, and `token_output_names`, the keys of its per-token outputs
    (None: its output is itself one per-token tensor), which a batch of several lengths
    pads.
    """

    text_input_names = ("text",)
    token_output_names = ()

    def __init__(self, encoder, preprocessor=None, segments=None, labels=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(encoder, BertEncoder):
            raise TypeError(f"encoder must be a BertEncoder, got {type(encoder).__name__}")
        if preprocessor is not None and not isinstance(preprocessor, BertPreprocessor):
            raise TypeError(f"preprocessor must be a BertPreprocessor or None, got {type(preprocessor).__name__}")
        if segments is not None and (not segments or len(set(segments)) != len(segments)):
            raise ValueError(f"segments must be distinct input names, got {segments!r}")
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.segments = None if segments is None else tuple(str(name) for name in segments)
        self.labels = None if labels is None else [str(label) for label in labels]

    # --- raw inputs -------------------------------------------------------------

    def preprocess_samples(self, x, y=None, sample_weight=None):
        """Raw batch -> packed batch; heads whose labels depend on tokenization override it."""
        return keras.utils.pack_x_y_sample_weight(self.preprocessor(x), y, sample_weight)

    def _raw(self, x):
        if isinstance(x, tf.distribute.DistributedDataset):
            return False  # distributed datasets are built from packed batches (see `distribute`)
        if is_packed(x) or (
            isinstance(x, tf.data.Dataset) and is_packed(keras.utils.unpack_x_y_sample_weight(x.element_spec)[0])
        ):
            return False
        if not holds_strings(x):
            return False
        if self.preprocessor is None:
            raise ValueError(
                f"{type(self).__name__} got raw strings but has no preprocessor; build it with "
                "preprocessor=BertPreprocessor(...) or pass packed int inputs"
            )
        return True

    def text_segments(self, x, record=False):
        """The names of the text inputs in raw `x` (arrays, or a dataset's elements):
        recorded in `segments` when training on `x` (`record`) or the first time, else
        checked against them: a model is served and asked what it was last fit on."""
        if isinstance(x, tf.data.Dataset):
            x = keras.utils.unpack_x_y_sample_weight(x.element_spec)[0]
        count = len(x) if isinstance(x, (tuple, dict)) else 1
        if isinstance(x, dict):
            names = tuple(x)
        else:
            default = self.text_input_names
            if count == len(default):
                names = tuple(default)
            elif count < len(default):
                names = tuple(default[-count:])
            else:
                names = tuple(f"text_{chr(ord('a') + i)}" for i in range(count))
        if self.segments is None or (record and len(self.segments) != count):
            self.segments = names
        elif len(self.segments) != count:
            raise ValueError(
                f"{type(self).__name__} was trained on {len(self.segments)} text input(s) "
                f"{list(self.segments)}; got {count}"
            )
        return self.segments

    def preprocessed_dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False):
        """Raw inputs (arrays, lists, or a batched `tf.data.Dataset` of `x` or `(x, y[, w])`)
        -> a `tf.data.Dataset` of packed batches, preprocessed outside the train step."""
        self.text_segments(x)
        if isinstance(x, tf.data.Dataset):
            if y is not None or sample_weight is not None or batch_size is not None:
                raise ValueError("when x is a tf.data.Dataset, pass no y, sample_weight or batch_size")
            dataset = x
        else:
            # A 1-tuple keeps inputs that are themselves a tuple of segments apart from (x, y).
            data = (segments_to_tensors(x),)
            if y is not None or sample_weight is not None:
                data = keras.utils.pack_x_y_sample_weight(data[0], segments_to_tensors(y), to_tensors(sample_weight))
            dataset = tf.data.Dataset.from_tensor_slices(data)
            if shuffle:
                dataset = dataset.shuffle(int(dataset.cardinality()), reshuffle_each_iteration=True)
            dataset = dataset.batch(batch_size or DEFAULT_BATCH_SIZE)

        def preprocess(*element):
            if len(element) == 1:
                return self.preprocess_samples(element[0])
            return self.preprocess_samples(*keras.utils.unpack_x_y_sample_weight(element))

        return dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def fit(self, x=None, y=None, batch_size=None, sample_weight=None, validation_data=None, shuffle=True, **kwargs):
        if self._raw(x):
            self.text_segments(x, record=True)
            x = self.preprocessed_dataset(x, y, sample_weight, batch_size, shuffle)
            y = sample_weight = batch_size = None
        if isinstance(x, (tf.data.Dataset, tf.distribute.DistributedDataset)):
            shuffle = False  # a dataset shuffles itself (ours did, before preprocessing)
        if validation_data is not None and not isinstance(validation_data, tf.data.Dataset):
            vx, vy, vsw = keras.utils.unpack_x_y_sample_weight(tuple(validation_data))
            if self._raw(vx):
                validation_data = self.preprocessed_dataset(vx, vy, vsw, batch_size)
        elif validation_data is not None and self._raw(validation_data):
            validation_data = self.preprocessed_dataset(validation_data)
        return super().fit(
            x,
            y,
            batch_size=batch_size,
            sample_weight=sample_weight,
            validation_data=validation_data,
            shuffle=shuffle,
            **kwargs,
        )

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        if self._raw(x):
            x = self.preprocessed_dataset(x, y, sample_weight, batch_size)
            y = sample_weight = batch_size = None
        return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight, **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        if self._raw(x):
            x = self.preprocessed_dataset(x, batch_size=batch_size)
            batch_size = None
        return super().predict(x, batch_size=batch_size, **kwargs)

    def _encode(self, inputs, training):
        if not is_packed(inputs):
            raise ValueError(
                f"{type(self).__name__} is called on the packed dict {list(INPUT_NAMES)}; for raw "
                "text use fit/evaluate/predict (which apply the preprocessor) or "
                "model(model.preprocessor(text))"
            )
        return self.encoder(inputs, training=training)

    # --- serving -----------------------------------------------------------------

    def serving_signature(self, preprocessor, labels=None):
        """The `ServingSignature` of this head with `preprocessor` (the export's copy);
        `labels` name the classes of heads that have them."""
        raise NotImplementedError(f"{type(self).__name__} defines no serving signature")

    # --- serialisation and checkpoints ------------------------------------------

    def get_config(self):
        config = super().get_config()
        config["encoder"] = keras.layers.serialize(self.encoder)
        config["preprocessor"] = None if self.preprocessor is None else keras.layers.serialize(self.preprocessor)
        config["segments"] = None if self.segments is None else list(self.segments)
        config["labels"] = self.labels
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.layers.deserialize(config["encoder"])
        if config.get("preprocessor") is not None:
            config["preprocessor"] = keras.layers.deserialize(config["preprocessor"])
        return cls(**config)

    @classmethod
    def from_checkpoint(
        cls, path, preprocessor=True, vocab=None, lower_case=None, seq_length=128, encoder_config=None, **kwargs
    ):
        """A new head on the encoder of any checkpoint `BertEncoder.from_checkpoint` reads.

        `preprocessor=True` builds one from the vocab.txt beside the checkpoint (or
        `vocab`) with `seq_length` (None: dynamic padding); `False` leaves it out.
        `encoder_config` overrides the checkpoint's config (e.g. dropout); `kwargs` go
        to the head's constructor."""
        encoder = BertEncoder.from_checkpoint(path, config=encoder_config)
        if preprocessor is True:
            preprocessor = preprocessor_for(encoder, vocab, lower_case, seq_length=seq_length)
        elif preprocessor is False:
            preprocessor = None
        return cls(encoder, preprocessor=preprocessor, **kwargs)
