"""A task head from a checkpoint read once (`checkpoint.read_checkpoint`): its encoder
(`models.saving.load_checkpoint`, the one encoder loader), the trained head of the
asked kind with its labels when the checkpoint has one, and a preprocessor for its
vocabulary and tokenizer settings."""

import warnings

from bert_keras.checkpoint.weights import set_original_weights
from bert_keras.compat import draws_deferred
from bert_keras.models.encoder import BertEncoder
from bert_keras.models.saving import load_checkpoint
from bert_keras.tasks.preprocessing import preprocessor_for

# Hugging Face classes that hold an encoder and no task head.
NO_TASK_HEAD = (None, "BertModel", "BertForPreTraining", "BertForMaskedLM")


def load_head(cls, found, encoder_config=None, new_head=False, preprocessor_arguments=None, **kwargs):
    """A `cls` head from the `Checkpoint` `found`: a `.keras` file of it as saved (its
    window arguments among `kwargs` applied), else `cls(encoder, **kwargs)` with the
    checkpoint's trained head of this kind (its arguments and weights) unless
    `new_head`, and the preprocessor `checkpoint_preprocessor` builds from
    `preprocessor_arguments` (`preprocessor`, `vocab`, `lower_case`, `seq_length`,
    `max_seq_length`)."""
    encoder = load_encoder(found, cls, encoder_config, new_head)
    if isinstance(encoder, cls):
        return with_arguments(encoder, {k: v for k, v in kwargs.items() if k in cls.window_argument_names})
    arguments = None if new_head or found.format == "keras" else trained_head_arguments(cls, found)
    for name, value in (arguments or {}).items():
        if name != "labels" and name in kwargs and kwargs[name] != value:
            raise ValueError(
                f"{found.path} holds a trained {cls.__name__} head with {name}={value!r}, not {kwargs[name]!r}; "
                "pass new_head=True to start a new head instead"
            )
    preprocessor = checkpoint_preprocessor(encoder, found, **(preprocessor_arguments or {}))
    with draws_deferred():  # a new head is drawn after the block, as it would have been
        model = cls(encoder, preprocessor=preprocessor, **{**(arguments or {}), **kwargs})
        if arguments is not None:
            source = f"checkpoint {found.path}"
            set_original_weights(model.head_weight_map(), found.head_weights, ignore=".", source=source)
    return model


def load_encoder(found, head_class, encoder_config=None, new_head=False):
    """The encoder of the `Checkpoint` `found` (`encoder_config` overriding its config),
    or, for a `.keras` file of a `head_class`, that whole model unless `new_head`."""
    model = load_checkpoint(BertEncoder, found, config=encoder_config, keras_classes=(head_class,))
    if isinstance(model, head_class):
        if not new_head:
            return model
        model = model.encoder
    if found.format == "keras" and encoder_config is not None:
        model = with_config(model, encoder_config)
    return model


def trained_head_arguments(head_class, found):
    """The constructor arguments of `head_class`'s trained head in `found`, or None
    (with a warning when it holds another kind of task head)."""
    head = found.head
    arguments = head_class.head_arguments(found.weights, head)
    if arguments is None and head["architecture"] not in NO_TASK_HEAD and head_class.hf_architecture is not None:
        warnings.warn(
            f"{found.path} holds a {head['architecture']} head, not a {head_class.__name__}: starting a new head "
            "on its encoder",
            stacklevel=4,
        )
    return arguments


def checkpoint_preprocessor(
    encoder, found, preprocessor=True, vocab=None, lower_case=None, seq_length=None, max_seq_length=None
):
    """The preprocessor a head loaded from the `Checkpoint` `found` gets: `True` builds
    one for its vocabulary (`preprocessor_for`; `max_seq_length` None: the
    `model_max_length` of a folder's tokenizer_config.json, as transformers reads the
    folder, else the model's positions, at most 512; more than the positions is an
    error), `False`/None none, a `BertPreprocessor` itself."""
    if preprocessor is False or preprocessor is None:
        return None
    if preprocessor is not True:
        return preprocessor
    positions = encoder.config.max_position_embeddings
    saved = found.tokenizer.max_length if found.path.is_dir() else None
    default = saved if saved is not None and saved <= positions else min(512, positions)
    max_seq_length = max_seq_length or default
    if max_seq_length > positions:
        raise ValueError(f"max_seq_length {max_seq_length} exceeds the model's max_position_embeddings {positions}")
    return preprocessor_for(
        encoder,
        vocab,
        lower_case,
        checkpoint=found.path,
        saved=found,
        seq_length=None if seq_length is None else min(seq_length, max_seq_length),
        max_seq_length=max_seq_length,
    )


def with_arguments(model, arguments):
    """`model` (a head loaded as saved), or a copy with other constructor `arguments`
    that change no weight (its windows)."""
    if all(model.get_config().get(name) == value for name, value in arguments.items()):
        return model
    with draws_deferred():
        copy = type(model).from_config({**model.get_config(), **arguments})
        copy.set_weights(model.get_weights())
    if model.compiled:
        copy.compile_from_config(model.get_compile_config())
    return copy


def with_config(encoder, config):
    """A copy of `encoder` with another config of the same shapes (e.g. dropout)."""
    with draws_deferred():
        copy = BertEncoder(config)
        copy.set_weights(encoder.get_weights())
    copy.vocab_path = encoder.vocab_path
    return copy
