"""What every task head shares: an encoder, an optional preprocessor for raw text,
and construction from any encoder checkpoint. Raw strings cannot go through the train
step (tf.text ops do not run under XLA or on TPU), so, as keras-hub's `Task` does,
`fit`/`evaluate`/`predict` turn raw inputs into a `tf.data` pipeline that maps
`preprocess_samples` over batches before the model sees them. The model's own `call`
only ever takes packed int inputs, which is what an exported serving signature wraps."""

import contextlib
import warnings
import weakref

import keras
import tensorflow as tf

from bert_keras.checkpoint.reader import read_checkpoint
from bert_keras.checkpoint.text_files import TokenizerSettings
from bert_keras.compat import BuildsBeforeTracing, RestoresCompile, WorksAroundKeras20585
from bert_keras.models.encoder import INPUT_NAMES, BertEncoder
from bert_keras.models.saving import save_checkpoint
from bert_keras.tasks.head_loading import load_head, with_arguments
from bert_keras.tasks.preprocessing import holds_strings, is_packed, one_pass, segments_to_tensors, to_tensors
from bert_keras.tasks.windowing import preprocess_windows, truncation_notice
from bert_keras.text.preprocessor import BertPreprocessor
from bert_keras.training.distribute import needs_static_shapes

DEFAULT_BATCH_SIZE = 32
# Each task's `preprocess_samples` as one `tf.function` (weak keys: an entry goes with its
# model): `tf.data` traces a mapped Python function again for every new dataset.
_PREPROCESS_FUNCTIONS = weakref.WeakKeyDictionary()


def preprocess_function(task):
    """`task.preprocess_samples` over a dataset element `(x,)` or `(x, y[, w])`, traced once
    per structure; a head that packs `x` alone (the base `preprocess_samples`) traces
    `pack_text` once per structure of `x`, shared by fitting on `(x, y)` and predicting on `(x,)`."""
    function = _PREPROCESS_FUNCTIONS.get(task)
    if function is None:
        reference = weakref.ref(task)  # the function must not keep its model alive
        own_packing = type(task).preprocess_samples is not BertTask.preprocess_samples
        pack_text = None if own_packing else tf.function(lambda x: reference().pack_text(x))

        @tf.function
        def function(*element):
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(element)
            if pack_text is not None:
                return keras.utils.pack_x_y_sample_weight(pack_text(x), y, sample_weight)
            return reference().preprocess_samples(x, y, sample_weight)

        function.pack_text = pack_text
        _PREPROCESS_FUNCTIONS[task] = function
    return function


def output_layer(encoder, units, name, per_token=False, width=None):
    """A head's new float32 Dense over the encoder's features (pooled, or every token's; or
    `width` wide, a head's own layers), with the original's init (truncated normal, 0.02)."""
    layer = keras.layers.Dense(
        units,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.config.initializer_range),
        dtype="float32",
        name=name,
    )
    layer.build((None,) * (1 + per_token) + (width or encoder.config.hidden_size,))
    return layer


def default_optimizer(learning_rate=5e-5):
    """The original fine-tuning AdamW (decay 0.01, none on LayerNorm and biases, global
    norm clipped to 1) at a constant rate; pipelines add warm-up and linear decay with
    `bert_keras.training.optimization.create_optimizer`, which needs the number of steps."""
    from bert_keras.training.optimization import AdamWeightDecay

    return AdamWeightDecay(learning_rate=learning_rate, weight_decay_rate=0.01, global_clipnorm=1.0)


class BertTask(RestoresCompile, BuildsBeforeTracing, WorksAroundKeras20585, keras.Model):
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
    pads; and `head_kind`, what predict's records, exports and MediaPipe take it for (None: none).
    """

    text_input_names = ("text",)
    token_output_names = ()
    head_kind = None
    # Heads that read long texts in windows (`bert_keras.tasks.windowing`) set these in
    # their constructor and name them in `window_argument_names`; None: truncation.
    doc_stride = None
    max_windows = None
    window_argument_names = ()

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
        return keras.utils.pack_x_y_sample_weight(self.pack_text(x), y, sample_weight)

    def pack_text(self, x):
        """Raw text -> packed inputs: `[B, L]`, or windows `[B, W, L]` with a `doc_stride`."""
        if self.doc_stride is None:
            return self.preprocessor(x)
        return preprocess_windows(self.preprocessor, x, self.doc_stride, self.max_windows).inputs

    def _warn_of_truncation(self, x):
        """Says once per `fit` on raw texts (not datasets) of a head that packs them as
        they are, how many truncation cuts and by how many pieces, unless it has windows."""
        if self.doc_stride is not None or isinstance(x, tf.data.Dataset):
            return
        if type(self).preprocess_samples is not BertTask.preprocess_samples:
            return  # a head with its own packing (words, choices, columns)
        texts = tuple(x[key] for key in sorted(x)) if isinstance(x, dict) else x
        notice = truncation_notice(self.preprocessor, texts, "training examples")
        if notice:
            warnings.warn(notice, stacklevel=3)

    def compile(self, *args, jit_compile="auto", **kwargs):
        """As Keras' `compile`; with windows, "auto" does not pick XLA, which cannot run
        the gather of real windows (its shape depends on the data), nor can TPUs."""
        if self.doc_stride is not None:
            if needs_static_shapes(tf.distribute.get_strategy()):
                raise ValueError(f"TPUs need fixed shapes; windows (doc_stride={self.doc_stride}) depend on the data")
            if jit_compile is True:
                raise ValueError(
                    f"XLA (jit_compile) cannot run windows (doc_stride={self.doc_stride}): the real windows' "
                    "count depends on the data"
                )
            jit_compile = False
        super().compile(*args, jit_compile=jit_compile, **kwargs)

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

        return dataset.map(preprocess_function(self), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def fit(self, x=None, y=None, batch_size=None, sample_weight=None, validation_data=None, shuffle=True, **kwargs):
        if self._raw(x):
            self.text_segments(x, record=True)
            self._warn_of_truncation(x)
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
        with self._window_bound_errors():
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
        with self._window_bound_errors():
            return super().evaluate(**one_pass(x, kwargs), y=y, batch_size=batch_size, sample_weight=sample_weight)

    def predict(self, x, batch_size=None, **kwargs):
        if self._raw(x):
            x = self.preprocessed_dataset(x, batch_size=batch_size)
            batch_size = None
        with self._window_bound_errors():
            return super().predict(**one_pass(x, kwargs), batch_size=batch_size)

    @contextlib.contextmanager
    def _window_bound_errors(self):
        """A document past `max_windows` stops the `tf.data` pipeline with an error whose
        cause is buried in the iterator's text: say it plainly."""
        try:
            yield
        except tf.errors.InvalidArgumentError as error:
            if self.max_windows is None or f"max_windows={self.max_windows} windows" not in str(error):
                raise
            raise ValueError(
                f"{type(self).__name__}: a document needs more than max_windows={self.max_windows} windows "
                f"(doc_stride={self.doc_stride}); pass a larger max_windows (with_windows(model, "
                "max_windows=...)), or split the document"
            ) from None

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

    # --- checkpoints: the trained head in and out ----------------------------------

    # The transformers class of this head (`BertFor...`), written to and read from config.json.
    hf_architecture = None

    @property
    def config(self):
        return self.encoder.config

    @property
    def vocab_path(self):
        return self.encoder.vocab_path

    def head_weight_map(self):
        """The head's variables -> original names, as `BertEncoder.original_weight_map`."""
        return []

    def original_weight_map(self):
        return self.encoder.original_weight_map() + self.head_weight_map()

    @classmethod
    def head_arguments(cls, weights, head):
        """The constructor arguments of the head of this kind that a checkpoint holds (its
        canonical `weights` and `Checkpoint.head` description), or None if it has none."""
        return None

    def checkpoint_head(self):
        """This head as `checkpoint.write` records it (class, labels, problem type); None
        for heads with no trained weights of their own, written as their encoder."""
        return None if self.hf_architecture is None else {"architecture": self.hf_architecture}

    @classmethod
    def from_checkpoint(
        cls,
        path,
        preprocessor=True,
        vocab=None,
        lower_case=None,
        seq_length=128,
        max_seq_length=None,
        encoder_config=None,
        new_head=False,
        format=None,
        revision=None,
        **kwargs,
    ):
        """This head from any checkpoint: a `.keras` file of it as saved, or the trained head
        (and label names) of a TF1 checkpoint or Hugging Face BertFor* folder that has one of
        this kind; otherwise, or with `new_head=True`, a new head on the checkpoint's encoder.

        `preprocessor=True` builds one from the vocab.txt beside the checkpoint (or `vocab`)
        padding to `seq_length` (None: each batch to its longest; at most `max_seq_length`)
        and truncating at `max_seq_length` (default: a Hugging Face folder's `model_max_length`,
        else the model's positions, at most 512); `False` leaves it out. `encoder_config`
        overrides the checkpoint's config (e.g. dropout); `kwargs` go to the head's constructor.
        `path` may be a Hub name (`ORG/NAME[@REVISION]`; `revision` pins a branch, tag or commit)."""
        return load_head(
            cls,
            read_checkpoint(path, format, revision=revision),
            encoder_config,
            new_head,
            dict(
                preprocessor=preprocessor,
                vocab=vocab,
                lower_case=lower_case,
                seq_length=seq_length,
                max_seq_length=max_seq_length,
            ),
            **kwargs,
        )

    def save_checkpoint(self, path, format="hf"):
        """Writes the model with its head as a Hugging Face BertFor* folder (config.json
        with `architectures`, `id2label`/`label2id`, `problem_type`; weights; vocab.txt and
        tokenizer_config.json), a TF1 checkpoint with the original's head variables and
        labels.txt, or a keras-hub preset (`format="keras-hub"`, a `BertTextClassifier` or
        the backbone alone); `format="keras"` saves the whole model."""
        if format == "keras":
            self.save(path)
            return
        vocab, settings = self.vocab_path, None
        if self.preprocessor is not None:
            tokenizer = self.preprocessor.tokenizer
            vocab = tokenizer.vocabulary
            settings = TokenizerSettings(tokenizer.lower_case, self.preprocessor.packer.max_seq_length)
        save_checkpoint(self, path, format, vocab, self.checkpoint_head(), settings)


def with_windows(model, **arguments):
    """`model` reading long texts with other windows: `doc_stride`, `window_pooling`,
    `max_windows` (those of its `window_argument_names`; None leaves one as it is)."""
    arguments = {name: value for name, value in arguments.items() if value is not None}
    unknown = sorted(set(arguments) - set(getattr(model, "window_argument_names", ())))
    if unknown:
        raise ValueError(f"a {type(model).__name__} has no windows to set ({', '.join(unknown)})")
    return with_arguments(model, arguments)
