"""LiteRT (`.tflite`) and ONNX exports, for phones and edge devices and for ONNX Runtime on CPU servers.

Both start from what the SavedModel export answers (the model's `ServingSignature`). LiteRT's
converter reads it from a SavedModel written by `keras.export.ExportArchive`, which saves the
Keras 3 variables the functions read (a `tf.Module` refuses them as untracked), and freezes
them itself. Freezing in Python first (`convert_variables_to_constants_v2`) is also exact
but holds several copies of the weights: over 11 GB for BERT-base, about 4 GB this way.

LiteRT takes raw text, one text or a pair (`litert_text`): the original BERT tokenizer's
rules run inside the file on any text, as builtin ops, a table of every code point and
tf.text's LiteRT kernels (`ByteSplit`, `FastWordpieceDetokenize`, `FastWordpieceTokenize`,
registered by `tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS`). The rare row it cannot
tokenize exactly (combining marks NFD would reorder, see `litert_text`) is refused:
`tokenized_exactly` is false and its outputs are NaN (integers -1, strings empty), never a
silently different answer. Heads whose text outputs need byte offsets (spans, word tags)
take the packed int32 ids instead, named as the TF Hub encoder's inputs.

ONNX exports (`onnx_export`) take the packed ids. What both formats share is in `portable`.

`quantize="int8"`: LiteRT's dynamic-range quantization (int8 weights, int8 matmuls on
activations quantized per batch) or ONNX Runtime's `quantize_dynamic` (the same idea,
weights quantized per output channel);
`"float16"` (LiteRT only): float16 weights, computed in float32.
"""

import tempfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bert_keras.compat import write_archive
from bert_keras.models.encoder import INPUT_NAMES
from bert_keras.serving.litert_text import LiteRTPacker
from bert_keras.serving.onnx_export import OnnxPredictor, export_onnx
from bert_keras.serving.portable import (
    check_quantize,
    ids_function,
    refuse_windows,
    require,
    write_vocab_beside,
)
from bert_keras.serving.serving_tasks import serving_signature, trained_inputs
from bert_keras.tasks.serving_signature import ServingSignature

FORMATS = ("litert", "onnx")
TOLERANCE = 1e-4  # float32 exports against Keras
EXACTNESS_OUTPUT = "tokenized_exactly"
# The self-check's texts: ASCII, empty, and accents, typographic punctuation, CJK, Greek, a ligature.
CHECK_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "",
    "an UNEXPECTEDLY funny, touching film!",
    "Ça va? “Très” bien… 東京 ΟΔΟΣ ﬁn",
)
# The custom ops of a text-in export, which tf.text's registrar adds to the interpreter.
TFTEXT_KERNELS = (
    "TFText>ByteSplitWithOffsets",
    "TFText>FastWordpieceDetokenize",
    "FastWordpieceTokenizeWithOffsets",
    "RaggedTensorToTensor",
)
# A text LiteRT refuses (marks of two combining classes that NFD would reorder), uncased.
REFUSED_TEXT = "\U0001d16d\U0001d165"


def takes_text(signature):
    """Whether a LiteRT export can take raw text: outputs that depend on the packed ids
    only (no byte offsets back into the text)."""
    return type(signature).from_text is ServingSignature.from_text


def text_function(signature, preprocessor, segments):
    """Raw texts (one input a segment) -> the signature's outputs plus `tokenized_exactly`,
    in LiteRT's ops."""
    packer = preprocessor.packer
    max_seq_length = packer.seq_length or packer.max_seq_length
    # A fixed seq_length is a dynamic length rounded up to a multiple of itself.
    multiple = packer.seq_length or packer.pad_to_multiple_of
    packer = LiteRTPacker(preprocessor.tokenizer, max_seq_length, multiple, packer.truncation)

    def serve_text(*texts):
        packed, exact = packer(texts)

        def run_refusing(ids):
            """The model's own outputs refused first, so that what the signature derives from
            them (label names, which LiteRT cannot blank later) is refused too."""
            return tf.nest.map_structure(lambda value: refused(value, exact), signature.run(ids))

        outputs = signature.from_ids(packed, run_refusing)
        outputs = {key: refused(value, exact) for key, value in outputs.items() if key not in INPUT_NAMES}
        return {**outputs, EXACTNESS_OUTPUT: exact}

    return serve_text, text_specs(segments), packer


def text_specs(segments):
    """A text export's inputs: `text` for one segment, else the segments' names."""
    names = ["text"] if len(segments) == 1 else segments
    return [tf.TensorSpec([None], tf.string, name=name) for name in names]


def refused(value, exact):
    """`value` with the rows that were not tokenized exactly blanked: NaN or -1. Strings
    (label names) come blank from the refused ids they name."""
    if value.dtype == tf.string:
        return value
    rows = tf.reshape(exact, [-1] + [1] * (value.shape.rank - 1))
    return tf.where(rows, value, tf.constant(float("nan") if value.dtype.is_floating else -1, value.dtype))


def litert_functions(model, preprocessor, labels=None, segments=None, text=True):
    """{signature key: (graph function, input specs)} of a LiteRT export, and whether it takes text.

    Text in: `serving_default` (text -> outputs + `tokenized_exactly`) and `tokenize`
    (text -> packed ids + `tokenized_exactly`). Ids in: `serving_default` on the ids."""
    refuse_windows(model, "LiteRT")
    signature = serving_signature(model, preprocessor, labels)
    segments = tuple(segments or signature.segments)
    if not (text and takes_text(signature)):
        return {"serving_default": ids_function(signature)}, False
    serve_text, specs, packer = text_function(signature, preprocessor, segments)

    def tokenize(*texts):
        packed, exact = packer(texts)
        return {**packed, EXACTNESS_OUTPUT: exact}

    return {"serving_default": (serve_text, specs), "tokenize": (tokenize, specs)}, True


def export_litert(model, preprocessor, path, labels=None, segments=None, quantize=None, text=True):
    """Writes `path` (.tflite) and `<stem>.vocab.txt` beside it; returns whether it takes
    text (where the model allows it, unless `text=False`). `labels` and `segments` default
    to the model's own, as the SavedModel export's do."""
    segments, labels = trained_inputs(model, segments, labels)
    functions, text = litert_functions(model, preprocessor, labels, segments, text)
    flatbuffer = litert_flatbuffer(functions, quantize, type(model).__name__)
    path = Path(path)
    path.write_bytes(flatbuffer)
    write_vocab_beside(preprocessor.tokenizer, path)
    return text


def litert_flatbuffer(functions, quantize, name):
    """{signature key: (graph function, input specs)} -> the converted .tflite bytes;
    an op LiteRT has no kernel for (other than tf.text's) is an error naming model `name`."""
    check_quantize("litert", quantize)
    archive = keras.export.ExportArchive()
    for key, (function, specs) in functions.items():
        archive.add_endpoint(key, function, input_signature=specs)
    with tempfile.TemporaryDirectory() as saved:
        write_archive(archive, saved)
        del archive  # its traced graphs; the converter reads the files
        converter = tf.lite.TFLiteConverter.from_saved_model(saved, signature_keys=list(functions))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        converter.allow_custom_ops = True  # tf.text's kernels, registered by its registrar at load
        if quantize is not None:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
        flatbuffer = converter.convert()
    unsupported = sorted(custom_ops(flatbuffer) - set(TFTEXT_KERNELS))
    if unsupported:
        raise ValueError(f"{name} uses TensorFlow ops that LiteRT has no kernel for: {unsupported}")
    return flatbuffer


def custom_ops(flatbuffer):
    """The names of the custom ops in a .tflite: those the converter left to the runtime."""
    schema = require("ai_edge_litert.schema_py_generated", "reading a LiteRT model")
    model = schema.Model.GetRootAsModel(flatbuffer, 0)
    codes = (model.OperatorCodes(index) for index in range(model.OperatorCodesLength()))
    return {code.CustomCode().decode() for code in codes if code.CustomCode()}


class LiteRTPredictor:
    """A `.tflite` export in ai-edge-litert's interpreter, with tf.text's kernels."""

    def __init__(self, path, threads=None):
        interpreter = require("ai_edge_litert.interpreter", "running a LiteRT export")
        from tensorflow_text import tflite_registrar

        self.interpreter = interpreter.InterpreterWithCustomOps(
            custom_op_registerers=list(tflite_registrar.SELECT_TFTEXT_OPS), model_path=str(path), num_threads=threads
        )
        self.signatures = self.interpreter.get_signature_list()
        self.path = path

    def __call__(self, signature="serving_default", **inputs):
        """Named numpy inputs -> named numpy outputs; raises on rows LiteRT cannot tokenize exactly."""
        outputs = self.interpreter.get_signature_runner(signature)(**inputs)
        if EXACTNESS_OUTPUT in outputs and not outputs[EXACTNESS_OUTPUT].all():
            rows = np.flatnonzero(~outputs[EXACTNESS_OUTPUT].astype(bool)).tolist()
            raise ValueError(
                f"{self.path}: rows {rows} hold combining marks of several classes side by side, which "
                "LiteRT's tokenizer does not order as the original BERT tokenizer's NFD; send their packed "
                "ids to an ids export (or the SavedModel) instead"
            )
        return outputs


def predictor(format, path, threads=None):
    return {"litert": LiteRTPredictor, "onnx": OnnxPredictor}[format](path, threads)


def check_export(format, path, model, preprocessor, labels=None, segments=None, texts=CHECK_TEXTS):
    """Loads the export in its runtime, runs `texts` (as text where it takes text, else
    packed) and returns {output: largest difference from Keras}. LiteRT text exports are
    also checked to refuse a text they cannot tokenize exactly."""
    segments, labels = trained_inputs(model, segments, labels)
    signature = serving_signature(model, preprocessor, labels)
    segments = tuple(segments or signature.segments)
    runtime = predictor(format, path)
    texts = [tf.constant(list(texts))] * len(segments)
    if format == "litert" and "tokenize" in runtime.signatures:
        expected = signature.from_text(texts, signature.run)
        names = [spec.name for spec in text_specs(segments)]
        outputs = runtime(**{name: text.numpy().astype(object) for name, text in zip(names, texts)})
        if preprocessor.tokenizer.lower_case:
            try:
                runtime(**{name: np.array([REFUSED_TEXT], dtype=object) for name in names})
                raise AssertionError(f"{path} answered a text it cannot tokenize exactly")
            except ValueError:
                pass
    else:
        packed = _ids_like(signature, preprocessor(texts))
        expected = signature.from_ids(packed, signature.run)
        outputs = runtime(**{name: value.numpy() for name, value in packed.items()})
    return {key: _difference(outputs[key], value.numpy()) for key, value in expected.items() if key not in INPUT_NAMES}


def _ids_like(signature, packed):
    """Packed ids shaped as the signature's id inputs ([batch, choices, seq] for multiple choice)."""
    specs = {spec.name: spec for spec in signature.ids_inputs()}
    return {
        name: tf.tile(value[:, tf.newaxis], [1, 2, 1]) if specs[name].shape.rank == 3 else value
        for name, value in packed.items()
    }


def export_checked(format, model, preprocessor, path, labels=None, segments=None, quantize=None):
    """Exports, loads the file in its runtime and compares it with Keras (`check_export`).

    Returns (takes text, {output: largest difference}); a float32 export further than
    TOLERANCE from Keras is an error. Quantized exports report their difference."""
    if format == "litert":
        text = export_litert(model, preprocessor, path, labels, segments, quantize)
    else:
        export_onnx(model, preprocessor, path, labels, quantize)
        text = False
    differences = check_export(format, path, model, preprocessor, labels, segments)
    if quantize is None and max(differences.values(), default=0.0) > TOLERANCE:
        raise ValueError(f"{path} differs from the Keras model by more than {TOLERANCE}: {differences}")
    return text, differences


def _difference(got, want):
    if want.dtype.kind in "SUO":
        text = np.vectorize(lambda value: value.decode() if isinstance(value, bytes) else str(value), otypes=[object])
        return 0.0 if np.array_equal(text(got), text(want)) else float("inf")
    return float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0))
