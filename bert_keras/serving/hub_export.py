"""The TF Hub BERT pair: reusable SavedModels that `hub.KerasLayer` fine-tunes and TF Serving loads.

The interface is TF Hub's "Common SavedModel APIs for Text" (BERT preprocessor and
Transformer encoder) on top of the reusable SavedModel API (tensorflow/hub
docs/reusable_saved_models.md), as Model Garden's
`official/nlp/tools/export_tfhub_lib.py` writes it:

`preprocess/` (no variables; the vocabulary is graph constants)
- `__call__(strings [batch])`: packed int32 `input_word_ids`, `input_mask`,
  `input_type_ids` `[batch, seq_length]`; also the `serving_default` signature (input `text`).
- `tokenize(strings)`: int32 ids ragged `[batch, (words), (pieces)]`;
  `tokenize.get_special_tokens_dict()`: int32 scalars `vocab_size`,
  `start_of_sequence_id`, `end_of_segment_id`, `padding_id`, `mask_id`.
- `tokenize_with_offsets(strings)`: ids and int64 byte offsets `(ids, starts, ends)`.
- `bert_pack_inputs(segments, seq_length=<default>)`: a list of 1 to `max_segments`
  int32 ragged segments, each `[batch, (pieces)]` or `[batch, (words), (pieces)]`;
  `seq_length` a Python int or a scalar int32 tensor.

`encoder/`
- `__call__(inputs, training=False)`: `pooled_output`, `default` (the same),
  `sequence_output` and the list `encoder_outputs` (one per layer), float32;
  `training=True` runs dropout. With `variables`, `trainable_variables` (each weight
  once) and `regularization_losses`, which `hub.KerasLayer(..., trainable=True)` trains.
- `mlm` (from pre-training models): `__call__(inputs + masked_lm_positions, training=False)`
  adds `mlm_logits` `[batch, positions, vocab]`; its variables add the MLM head's.
- `serving_default` signature for TF Serving: the inference outputs flattened
  (`encoder_outputs_<i>`), since a signature cannot return a list.

Why not `keras.export.ExportArchive`, which `export.py` uses: it makes every endpoint a
signature, and a signature can neither return the `encoder_outputs` list nor carry
sub-objects (`mlm`, `tokenize.get_special_tokens_dict`). These objects hold only the
`tf.Variable`s that the traced functions capture, not the Keras variables that wrap
them: the same content ExportArchive writes, so each weight is stored once and the
TF1 session loader of TF Serving finds them.
"""

from pathlib import Path

import tensorflow as tf

from bert_keras.compat import saved_object
from bert_keras.models.encoder import INPUT_NAMES, BertEncoder
from bert_keras.models.pretrainer import BertPretrainer

ENCODER_INPUTS = {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES}
MLM_INPUTS = {**ENCODER_INPUTS, "masked_lm_positions": tf.TensorSpec([None, None], tf.int32)}


def export_hub_style(model, preprocessor, export_dir, max_segments=3):
    """Writes `export_dir/preprocess` and `export_dir/encoder`; returns both paths.

    `model`: a `BertEncoder`, a `BertPretrainer` (the encoder then gets the `mlm`
    sub-object) or a task model (its `encoder` is exported). `preprocessor`: a
    `BertPreprocessor` whose fixed `seq_length` is the preprocess model's default.
    `bert_pack_inputs` is traced for 1 to `max_segments` segments: a SavedModel holds
    one graph per input structure, so the count is fixed at export (Model Garden
    traces 1 and 2; 3 also covers e.g. a context, a question and an answer).
    """
    if not isinstance(preprocessor.packer.seq_length, int):
        raise ValueError("the hub preprocess model needs a preprocessor with a fixed seq_length")
    export_dir = Path(export_dir)
    preprocess_path, encoder_path = export_dir / "preprocess", export_dir / "encoder"
    save_preprocess(preprocessor, preprocess_path, max_segments)
    save_encoder(model, encoder_path)
    return preprocess_path, encoder_path


def save_preprocess(preprocessor, path, max_segments=3):
    """The preprocess model alone (no variables): see the module docstring."""
    strings = tf.TensorSpec([None], tf.string)
    special_tokens = tf.function(
        lambda: {name: tf.constant(value, tf.int32) for name, value in preprocessor.get_special_tokens_dict().items()},
        input_signature=[],
    )
    tokenize = _callable(tf.function(preprocessor.tokenize, input_signature=[strings]))
    tokenize.get_special_tokens_dict = special_tokens
    tokenize_with_offsets = _callable(tf.function(preprocessor.tokenize_with_offsets, input_signature=[strings]))
    tokenize_with_offsets.get_special_tokens_dict = special_tokens

    default_length = preprocessor.packer.seq_length

    def bert_pack_inputs(inputs, seq_length=default_length):
        return preprocessor.bert_pack_inputs(list(inputs), seq_length)

    pack = tf.function(bert_pack_inputs, autograph=False)
    for ragged_rank in (1, 2):
        segment = tf.RaggedTensorSpec([None] * (ragged_rank + 1), tf.int32, ragged_rank, tf.int64)
        for num_segments in range(1, max_segments + 1):
            pack.get_concrete_function([segment] * num_segments, tf.TensorSpec([], tf.int32))

    def preprocess(text):
        return preprocessor.bert_pack_inputs([preprocessor.tokenize(text)], default_length)

    root = _callable(tf.function(preprocess, input_signature=[tf.TensorSpec([None], tf.string, name="text")]))
    root.tokenize = tokenize
    root.tokenize_with_offsets = tokenize_with_offsets
    root.bert_pack_inputs = _callable(pack)
    tf.saved_model.save(root, str(path), signatures={"serving_default": root.__call__})


def save_encoder(model, path):
    """The encoder as a reusable SavedModel, with `mlm` for a `BertPretrainer`."""
    pretrainer = model if isinstance(model, BertPretrainer) else None
    encoder = getattr(model, "encoder", model)
    if not isinstance(encoder, BertEncoder):
        raise TypeError(f"model must be a BertEncoder or hold one as .encoder, got {type(model).__name__}")

    def encode(inputs, training=False):
        outputs = _float32(encoder(dict(inputs), training=training))
        return {**outputs, "default": outputs["pooled_output"]}

    root = _reusable(encode, ENCODER_INPUTS)
    if pretrainer is not None:

        def mlm(inputs, training=False):
            outputs = encoder({name: inputs[name] for name in INPUT_NAMES}, training=training)
            masked = tf.gather(outputs["sequence_output"], inputs["masked_lm_positions"], batch_dims=1)
            logits = pretrainer.masked_lm_head(masked, encoder.embeddings.word_embeddings)
            return _float32({**outputs, "mlm_logits": logits})

        root.mlm = _reusable(mlm, MLM_INPUTS)

    def serve(input_word_ids, input_mask, input_type_ids):
        outputs = encode({"input_word_ids": input_word_ids, "input_mask": input_mask, "input_type_ids": input_type_ids})
        layers = outputs.pop("encoder_outputs")
        return {**outputs, **{f"encoder_outputs_{index}": layer for index, layer in enumerate(layers)}}

    signature = tf.function(serve, input_signature=list(ENCODER_INPUTS.values()))
    tf.saved_model.save(root, str(path), signatures={"serving_default": signature})


def _float32(outputs):
    """Float32 outputs (also from mixed-precision models), `encoder_outputs` as a list."""
    outputs = tf.nest.map_structure(lambda tensor: tf.cast(tensor, tf.float32), outputs)
    return {**outputs, "encoder_outputs": list(outputs["encoder_outputs"])}


def _callable(function):
    """A SavedModel object that loads as a callable. The object type of ExportArchive's
    root: a `tf.train.Checkpoint`, as Model Garden uses, would add a `save_counter`."""
    saved = saved_object()
    saved.__call__ = function
    return saved


def _reusable(call, input_spec):
    """`call(inputs, training)` as a reusable SavedModel object: traced for both
    values of `training`, with the variables those traces capture."""
    function = tf.function(call, autograph=False)
    traces = [function.get_concrete_function(input_spec, training) for training in (False, True)]
    variables = list({id(v): v for trace in traces for v in trace.variables}.values())
    saved = _callable(function)
    saved.variables = variables
    saved.trainable_variables = [v for v in variables if v.trainable]
    saved.regularization_losses = []
    return saved
