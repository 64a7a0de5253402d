"""SavedModel export for TensorFlow Serving, with tokenization inside the graph.

`export_for_serving` writes the layout TF Serving watches, `BASE/<version>/` with
`saved_model.pb`, `variables/`, `assets/vocab.txt` and `assets.extra/` (labels, the
head's kind and warm-up requests), through `keras.export.ExportArchive`: TF Serving's C++ loader
finds Keras 3 variables only in archives written that way. The model itself is not
`track`ed: its variables come with the endpoints that use them, and tracking it too
stores every weight twice (keras-team/keras#23553: a BERT-base export of 836 MB instead
of 418 MB, and twice the variable memory in TF Serving).

Signatures:
- `serving_default`: raw UTF-8 strings, one `[batch]` tf.string input per text segment
  (`text`, or e.g. `text_a` + `text_b`), returning the task's float32 outputs.
- `serve_ids`: packed int32 `input_word_ids`, `input_mask`, `input_type_ids`.
- `word_pieces`: the same string inputs as `serving_default`, answering the word pieces
  the model reads of them (`ServingSignature.word_pieces`: with a `doc_stride`, each
  window's; a fill-mask model's with each literal `[MASK]` the mask piece), for people and
  the page of `bert-keras serve`; not for multiple choice.
- more signatures on the same string inputs where the head has them
  (`ServingSignature.text_signatures`), e.g. a span reader's `span_candidates`.
Outputs are float32 even for mixed-precision models, since REST JSON has no bfloat16.
"""

import copy
from pathlib import Path

import keras
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from bert_keras.checkpoint.text_files import read_labels, write_labels, write_vocab
from bert_keras.compat import write_archive
from bert_keras.models.dtype import warn_if_slow_bfloat16, with_dtype
from bert_keras.serving.layout import EXTRA_DIR, WARMUP_PATH, serving_signatures
from bert_keras.serving.serving_tasks import serving_signature, text_runner, trained_inputs
from bert_keras.tasks.preprocessing import preprocessor_for
from bert_keras.text.preprocessor import BertPreprocessor
from bert_keras.text.tokenizer import BertTokenizer
from bert_keras.text.vocab import check_vocabulary

LABELS_FILE = "labels.txt"
WORD_PIECES_SIGNATURE = "word_pieces"
HEAD_KIND_FILE = "head_kind.txt"  # the model's `head_kind`, which `predict` decodes the outputs by
DEFAULT_MAX_WINDOWS = 16  # windows per served document of a head with a doc_stride
# Bytes of input text kept per segment per token of the sequence: a bound on the work a
# huge request can cause that never cuts text that could still fit the sequence.
BYTES_PER_TOKEN = 100
DEFAULT_WARMUP_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "",
    "Ünïcödé, 中文, and emoji 🙂 are fine too.",
)


def export_for_serving(
    model,
    preprocessor,
    export_dir,
    version=1,
    segments=None,
    labels=None,
    warmup_texts=DEFAULT_WARMUP_TEXTS,
    model_name="bert",
    top_k=5,
    compute_dtype=None,
    micro_batches=4,
    max_windows=None,
):
    """Writes `export_dir/<version>/` for TF Serving and returns that path.

    `model` is a `BertEncoder` or a task model; `preprocessor` a `BertPreprocessor`
    (its `seq_length=None` mode pads each request batch only to its longest text,
    the fastest choice for serving; the texts then also run in up to `micro_batches`
    length-sorted micro-batches, each padded only to its own longest text, see
    `serving_tasks.length_sorted`). `segments` names the string inputs (default: the
    model's, e.g. `text`, or `question` and `context` for span models); `labels`
    (class names) adds a `labels` output to classifiers and is written to
    `assets.extra/labels.txt`. `warmup_texts` become PredictionLog warm-up requests
    (each segment gets the same texts). `top_k` is the fill-mask candidates per mask.
    `compute_dtype="bfloat16"` exports bfloat16 weights and matmuls (faster on CPUs with
    AVX512-BF16 or AMX); the residual stream, LayerNorm, softmax, embedding tables and
    outputs stay float32, which keeps pooled outputs within about 1e-2 of float32.
    What the model answers is its `ServingSignature` (`serving_tasks.serving_signature`).
    A head with a `doc_stride` is served whole documents, windowed in the graph, at most
    `max_windows` windows each (default: the model's, else `DEFAULT_MAX_WINDOWS`); a
    longer one is refused with INVALID_ARGUMENT.
    """
    _check_arguments(preprocessor, segments)
    path = Path(export_dir) / str(int(version))
    if path.exists():
        raise FileExistsError(f"{path} exists; TF Serving versions are immutable, pick a new version")
    segments, labels = trained_inputs(model, segments, labels)
    doc_stride = getattr(model, "doc_stride", None)
    max_windows = _max_windows(model, doc_stride, max_windows)
    preprocessor = bounded_preprocessor(preprocessor, doc_stride, max_windows)
    if compute_dtype is not None:
        if compute_dtype == "bfloat16":
            warn_if_slow_bfloat16("the bfloat16 export (on a CPU like this one)")
        model = with_dtype(model, compute_dtype)
    signature = serving_signature(model, preprocessor, labels, top_k)
    if doc_stride is not None:
        signature.max_windows = max_windows
    segments = tuple(segments or signature.segments)
    _write_archive(path, signature, preprocessor, segments, micro_batches)
    _write_assets(path, preprocessor, labels, getattr(model, "head_kind", None))
    if warmup_texts:
        batches = (list(warmup_texts), list(warmup_texts)[:1])
        write_warmup_requests(
            path / WARMUP_PATH, model_name, [signature.warmup_inputs(segments, batch) for batch in batches]
        )
    return path


def _check_arguments(preprocessor, segments):
    if not isinstance(preprocessor, BertPreprocessor):
        raise TypeError(f"preprocessor must be a BertPreprocessor, got {type(preprocessor).__name__}")
    if segments is not None and (not segments or len(set(segments)) != len(segments)):
        raise ValueError(f"segments must be distinct input names, got {segments!r}")


def _max_windows(model, doc_stride, max_windows):
    """The windows served per document: only a head with a `doc_stride` has them."""
    if doc_stride is not None:
        return max_windows or model.max_windows or DEFAULT_MAX_WINDOWS
    if max_windows is not None:
        raise ValueError(
            f"max_windows bounds the windows of long documents; this {type(model).__name__} has no doc_stride"
        )
    return None


def _write_archive(path, signature, preprocessor, segments, micro_batches):
    """The SavedModel: `serving_default` on text, `serve_ids` on packed ids and, where
    the signature serves them, `word_pieces` on text, and the head's `text_signatures`.
    The model is one function the endpoints call: traced once, not once per call site
    (`serving_default`'s micro-batches call it twice, `serve_ids` once)."""
    signature = copy.copy(signature)
    signature.run = tf.function(signature.run, reduce_retracing=True)
    run_text = text_runner(signature, micro_batches)

    def serve_text(*texts):
        return signature.from_text(list(texts), run_text)

    def serve_ids(input_word_ids, input_mask, input_type_ids):
        return signature.from_ids(
            {"input_word_ids": input_word_ids, "input_mask": input_mask, "input_type_ids": input_type_ids},
            signature.run,
        )

    archive = keras.export.ExportArchive()
    archive.track(preprocessor)  # its tf.text resources; the endpoints bring the model's variables
    archive.add_endpoint(
        "serving_default",
        serve_text,
        input_signature=signature.text_inputs(segments),
    )
    archive.add_endpoint(
        "serve_ids",
        serve_ids,
        input_signature=signature.ids_inputs(),
    )
    for name, answer in signature.text_signatures(run_text).items():
        archive.add_endpoint(name, _on_texts(answer), input_signature=signature.text_inputs(segments))
    if signature.serves_word_pieces:
        archive.add_endpoint(
            WORD_PIECES_SIGNATURE,
            _on_texts(signature.word_pieces),
            input_signature=signature.text_inputs(segments),
        )
    write_archive(archive, path)


def _on_texts(answer):
    """`answer` (a function of the list of texts) as an endpoint of one argument per segment."""
    return lambda *texts: answer(list(texts))


def _write_assets(path, preprocessor, labels, head_kind):
    """`assets/vocab.txt`, `assets.extra/labels.txt` and `assets.extra/head_kind.txt` beside the graph."""
    # The graph holds the vocabulary as constants; this copy is for people and tools.
    (path / "assets").mkdir(exist_ok=True)
    write_vocab(preprocessor.tokenizer.vocabulary, path / "assets" / "vocab.txt")
    extra = path / EXTRA_DIR
    extra.mkdir()
    if labels is not None:
        write_labels(labels, extra / LABELS_FILE)
    if head_kind is not None:
        (extra / HEAD_KIND_FILE).write_text(f"{head_kind}\n", encoding="utf-8")


def bounded_preprocessor(preprocessor, doc_stride=None, max_windows=None):
    """A copy of the preprocessor whose tokenizer reads a bounded prefix of each text
    (with windows: of what `max_windows` windows `doc_stride` apart can hold)."""
    max_tokens = preprocessor.packer.seq_length or preprocessor.packer.max_seq_length
    if doc_stride is not None:
        max_tokens += (max_windows - 1) * doc_stride
    config = preprocessor.tokenizer.get_config()
    if config["max_input_bytes"] is None:
        config["max_input_bytes"] = BYTES_PER_TOKEN * max_tokens
    tokenizer = BertTokenizer.from_config(config)
    preprocessor_config = preprocessor.get_config()
    preprocessor_config["tokenizer"] = tokenizer
    return BertPreprocessor.from_config(preprocessor_config)


def write_warmup_requests(path, model_name, requests):
    """TF Serving replays these PredictionLog records at load, before taking traffic.

    `requests`: the string inputs of each request, `{name: strings}`."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        for inputs in requests:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name="serving_default")
            )
            for name, strings in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(strings, dtype=tf.string))
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())


def served_labels(export_path):
    """The label names an export serves (`assets.extra/labels.txt`); None without them."""
    return read_labels(Path(export_path) / EXTRA_DIR / LABELS_FILE)


def read_head_kind(export_path):
    """The `head_kind` of the model an export serves (`assets.extra/head_kind.txt`); None
    for an export written before it was recorded, or of a model with none."""
    path = Path(export_path) / EXTRA_DIR / HEAD_KIND_FILE
    return path.read_text(encoding="utf-8").strip() if path.is_file() else None


def describe_signatures(export_path):
    """Signature names -> input and output names, dtypes and shapes (like saved_model_cli)."""
    saved_model = saved_model_pb2.SavedModel.FromString((Path(export_path) / "saved_model.pb").read_bytes())
    return {
        name: {
            side: {
                key: [tf.dtypes.as_dtype(info.dtype).name, [d.size for d in info.tensor_shape.dim]]
                for key, info in getattr(signature, side).items()
            }
            for side in ("inputs", "outputs")
        }
        for name, signature in serving_signatures(saved_model.meta_graphs[0]).items()
    }


def serving_preprocessor(model, source=None, vocab=None, cased=False, max_seq_length=None):
    """The model's own preprocessor, or one on `vocab` (checked against the model's
    vocabulary), in dynamic-length mode, up to the length it was trained at unless
    `max_seq_length` is given."""
    preprocessor = getattr(model, "preprocessor", None)
    encoder = getattr(model, "encoder", model)
    if preprocessor is not None:
        if vocab is not None:
            check_vocabulary(vocab, encoder.config.vocab_size, source, preprocessor.tokenizer.vocabulary)
        tokenizer = preprocessor.tokenizer
        trained = preprocessor.packer.seq_length or preprocessor.packer.max_seq_length
    else:
        tokenizer = preprocessor_for(encoder, vocab, None if vocab is None else not cased, checkpoint=source).tokenizer
        trained = None
    return BertPreprocessor(
        BertTokenizer.from_config(tokenizer.get_config()),
        seq_length=None,
        max_seq_length=max_seq_length or trained or 512,
    )
