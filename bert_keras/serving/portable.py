"""What the LiteRT and ONNX exports share: the signature on packed ids, the refusals, the
optional runtimes of the `[deploy]` extra and the vocabulary file beside the export."""

import importlib
from pathlib import Path

from bert_keras.checkpoint.text_files import write_vocab
from bert_keras.models.encoder import INPUT_NAMES
from bert_keras.serving.serving_tasks import FillMaskSignature

QUANTIZATIONS = {"litert": ("int8", "float16"), "onnx": ("int8",)}


class MissingRuntime(ImportError):
    """A converter or runtime of the `[deploy]` extra is not installed."""


def require(module, what):
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingRuntime(
            f"{what} needs the Python module `{module}` ({error}); install it with: pip install 'bert-keras[deploy]'"
        ) from None


def refuse_windows(model, format):
    """Portable exports take one window a text: a head with a `doc_stride` would silently
    answer its first window only."""
    if getattr(model, "doc_stride", None) is not None:
        raise ValueError(
            f"a {format} export reads one window a text; this {type(model).__name__} reads long texts in windows "
            f"(doc_stride={model.doc_stride}): export it as a SavedModel, which makes the windows in the graph"
        )


def ids_function(signature, run=None):
    """The signature on packed int32 ids, as a graph function of named inputs (the model
    run by `run`, default `signature.run`). Outputs that are inputs passed through (the
    encoder's `input_mask`) are left out: the caller has them."""
    if isinstance(signature, FillMaskSignature):
        raise ValueError(
            "fill-mask (BertPretrainer) exports only as a SavedModel: LiteRT has no kernels for the "
            "broadcasting selects and slices of its top-k outputs, and ONNX Runtime fails on tf2onnx's graph"
        )
    specs = signature.ids_inputs()
    run = run or signature.run

    def serve_ids(*ids):
        outputs = signature.from_ids(dict(zip(INPUT_NAMES, ids)), run)
        return {key: value for key, value in outputs.items() if key not in INPUT_NAMES}

    return serve_ids, specs


def check_quantize(format, quantize):
    if quantize is not None and quantize not in QUANTIZATIONS[format]:
        raise ValueError(f"{format} exports quantize to {' or '.join(QUANTIZATIONS[format])}, not {quantize!r}")


def write_vocab_beside(tokenizer, path):
    """The tokenizer's vocab.txt beside a portable model file (`model.vocab.txt` for `model.tflite`)."""
    return write_vocab(tokenizer.vocabulary, Path(path).with_suffix(".vocab.txt"))
