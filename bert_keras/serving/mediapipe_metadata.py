"""LiteRT exports that MediaPipe Tasks' text API runs: `TextClassifier` and `TextEmbedder`
(Android, iOS, web and Python) read an ids-in `.tflite` with TFLite metadata and tokenize
in the app themselves.

The metadata is the flatbuffer of MediaPipe's `metadata_schema.fbs` (its generated
Python classes ship in the `mediapipe` wheel), stored in the model's `metadata` list
under the name `TFLITE_METADATA`: the three inputs named `ids`, `mask` and
`segment_ids` (MediaPipe's BERT preprocessor finds them by these names, in any
order), a `BertTokenizerOptions` input process unit whose vocabulary is an associated
file, and the output, with the class names as a `TENSOR_AXIS_LABELS` file for a
classifier. Associated files travel in an uncompressed zip appended to the flatbuffer,
which is how MediaPipe's metadata populator packs them (its writers need a native
module the wheel lacks on some platforms; this module needs only the generated code).

MediaPipe's tokenizer lowercases ASCII letters only and splits on its own punctuation
rules (no accent stripping, no Unicode lowercasing, no CJK splitting), so it gives the
original BERT tokenizer's ids on plain English text; bench/bench_tokenizer.py mediapipe measures
how often it differs on real text. Cased vocabularies are refused: the lowercasing
cannot be turned off.
"""

import io
import unicodedata
import zipfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from bert_keras.models.encoder import INPUT_NAMES
from bert_keras.serving import deploy, portable
from bert_keras.serving.serving_tasks import serving_signature, trained_inputs
from bert_keras.text.preprocessor import BertPreprocessor

METADATA_NAME = "TFLITE_METADATA"
METADATA_IDENTIFIER = b"M001"
TFLITE_IDENTIFIER = b"TFL3"
# BertTokenizerOptions and input process units are schema 1.1.0 fields; nothing newer is written.
MIN_PARSER_VERSION = "1.1.0"
# The metadata names MediaPipe's BertPreprocessorCalculator looks the inputs up by.
INPUT_METADATA_NAMES = {"input_word_ids": "ids", "input_mask": "mask", "input_type_ids": "segment_ids"}
VOCABULARY_FILE = "vocab.txt"
LABELS_FILE = "labels.txt"
# The one output each kind of head (its `head_kind`) answers MediaPipe with: class
# probabilities or the embedding.
OUTPUTS = {"classifier": "probabilities", "multi-label": "probabilities", "embedder": "embeddings"}


def export_mediapipe(model, preprocessor, path, labels=None, seq_length=None, quantize=None):
    """Writes `path`: an ids-in `.tflite` (inputs `[1, seq_length]` int32, one float32
    output) with the metadata MediaPipe's `TextClassifier` (a `BertClassifier`, its
    classes named by `labels`, default the model's own) or `TextEmbedder` (a
    `BertTextEmbedder`) reads. `seq_length` (default: the preprocessor's fixed or
    longest length) is what MediaPipe pads or cuts every text to."""
    if not preprocessor.tokenizer.lower_case:
        raise ValueError(
            "MediaPipe's BERT tokenizer lowercases every text; a cased vocabulary would get other ids: "
            "export a cased model with --format litert (without --mediapipe) or as a SavedModel"
        )
    classifier = OUTPUTS.get(getattr(model, "head_kind", None)) == "probabilities"
    labels = trained_inputs(model, labels=labels)[1] if classifier else labels
    if labels is not None and classifier:
        check_labels(labels, model.num_classes, path)
    signature = serving_signature(model, preprocessor, labels)
    function, specs = mediapipe_function(signature, seq_length)
    flatbuffer = deploy.litert_flatbuffer({"serving_default": (function, specs)}, quantize, type(model).__name__)
    if classifier and labels is None:
        labels = [str(index) for index in range(model.num_classes)]
    vocabulary = preprocessor.tokenizer.vocabulary
    Path(path).write_bytes(with_metadata(flatbuffer, vocabulary, labels, type(model).__name__))


def mediapipe_function(signature, seq_length=None):
    """(graph function, input specs): the signature's model on one packed text of
    `seq_length` ids, answering its one MediaPipe output (`OUTPUTS`)."""
    model = signature.model
    portable.refuse_windows(model, "MediaPipe")
    kind, name = getattr(model, "head_kind", None), type(model).__name__
    if kind == "regression":
        raise ValueError(f"MediaPipe's TextClassifier answers class scores; this {name} is a regression")
    if kind not in OUTPUTS:
        raise ValueError(f"MediaPipe's text tasks run a BertClassifier or BertTextEmbedder, not a {name}")
    output = OUTPUTS[kind]
    length = packed_length(signature.preprocessor, seq_length)

    def serve(input_word_ids, input_mask, input_type_ids):
        packed = dict(zip(INPUT_NAMES, (input_word_ids, input_mask, input_type_ids)))
        return {output: signature.from_ids(packed, signature.run)[output]}

    return serve, [tf.TensorSpec([1, length], tf.int32, name=name) for name in INPUT_NAMES]


def packed_length(preprocessor, seq_length=None):
    """The ids MediaPipe packs each text into: `seq_length`, else the preprocessor's fixed
    length, else its longest."""
    return int(seq_length or preprocessor.packer.seq_length or preprocessor.packer.max_seq_length)


def check_labels(labels, num_classes, path):
    """A clear error naming `path` and its `labels.txt` unless `labels` are `num_classes`
    names that the file, one name a line, holds as they are: none empty, none with a line
    break, tab or other control character."""
    where = f"{path} ({LABELS_FILE})"
    labels = list(labels)
    if len(labels) != num_classes:
        raise ValueError(
            f"{where}: {len(labels)} label(s) for the classifier's {num_classes} classes; give one name a class"
        )
    for index, label in enumerate(labels):
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"{where}: label {index} ({label!r}) is not a name: empty, blank or not text")
        if any(unicodedata.category(character) in ("Cc", "Zl", "Zp") for character in label):
            raise ValueError(
                f"{where}: label {index} ({label!r}) holds a line break, tab or other control character; "
                "the file holds one label a line"
            )


def export_checked(model, preprocessor, path, labels=None, seq_length=None, quantize=None, texts=deploy.CHECK_TEXTS):
    """`export_mediapipe`, then the file run by MediaPipe's own Python task on `texts`
    against the Keras model on the original tokenizer's ids: returns the largest
    difference (with the class names MediaPipe answers); a float32 export further than
    `deploy.TOLERANCE` is an error."""
    export_mediapipe(model, preprocessor, path, labels, seq_length, quantize)
    function, specs = mediapipe_function(serving_signature(model, preprocessor), seq_length)
    packed = BertPreprocessor(preprocessor.tokenizer, seq_length=specs[0].shape[1])(tf.constant(list(texts)))
    expected = next(iter(function(*(packed[name] for name in INPUT_NAMES)).values())).numpy()
    with MediaPipeTask(path) as task:
        got, names = task(texts)
    difference = float(np.max(np.abs(got - expected)))
    if quantize is None and difference > deploy.TOLERANCE:
        raise ValueError(f"{path} in MediaPipe differs from the Keras model by {difference:.2e}")
    return difference, names


class MediaPipeTask:
    """A MediaPipe export in MediaPipe's Python `TextClassifier` (when it carries class
    names) or `TextEmbedder`, on CPU; close it (or use `with`) before exiting."""

    def __init__(self, path):
        tasks = portable.require("mediapipe.tasks.python.text", "running a MediaPipe export")
        options = portable.require("mediapipe.tasks.python.core.base_options", "running a MediaPipe export")
        with zipfile.ZipFile(path) as files:
            self.classifier = LABELS_FILE in files.namelist()
        task, task_options = (
            (tasks.TextClassifier, tasks.TextClassifierOptions)
            if self.classifier
            else (tasks.TextEmbedder, tasks.TextEmbedderOptions)
        )
        self.task = task.create_from_options(task_options(base_options=options.BaseOptions(model_asset_path=str(path))))

    def __call__(self, texts):
        """(`[texts, classes]` scores in class order, class names) or (`[texts, dim]` embeddings, None)."""
        if not self.classifier:
            return np.stack([self.task.embed(text).embeddings[0].embedding for text in texts]), None
        rows, names = [], {}
        for text in texts:
            categories = self.task.classify(text).classifications[0].categories
            names.update((category.index, category.category_name) for category in categories)
            row = np.zeros(len(categories), np.float32)
            row[[category.index for category in categories]] = [category.score for category in categories]
            rows.append(row)
        return np.stack(rows), [names[index] for index in sorted(names)]

    def close(self):
        self.task.close()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()


def tokenizer_probe(vocabulary, seq_length, path):
    """Writes `path`: a `.tflite` whose MediaPipe `TextEmbedder` "embedding" is the ids,
    mask and segment ids MediaPipe's own tokenizer packs a text into (`[3 * seq_length]`
    floats), with `vocabulary` as its tokenizer's: how an app's tokenization is checked
    against the original's."""

    def serve(input_word_ids, input_mask, input_type_ids):
        return {"packed": tf.cast(tf.concat([input_word_ids, input_mask, input_type_ids], axis=1), tf.float32)}

    specs = [tf.TensorSpec([1, seq_length], tf.int32, name=name) for name in INPUT_NAMES]
    flatbuffer = deploy.litert_flatbuffer({"serving_default": (serve, specs)}, None, "tokenizer_probe")
    Path(path).write_bytes(with_metadata(flatbuffer, vocabulary, name="tokenizer_probe"))


def with_metadata(flatbuffer, vocabulary, labels=None, name="bert"):
    """A `.tflite`'s bytes with MediaPipe's BERT text metadata: its inputs must be the
    three packed id tensors (named as `INPUT_NAMES` by the converter), its one output
    class scores (`labels`: their names) or an embedding (`labels=None`)."""
    schema = portable.require("ai_edge_litert.schema_py_generated", "the MediaPipe export")
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(flatbuffer, 0))
    if len(model.subgraphs) != 1:
        raise ValueError(f"MediaPipe's text tasks run a model of one subgraph, this one has {len(model.subgraphs)}")
    subgraph = model.subgraphs[0]
    inputs = [subgraph.tensors[index].name.decode() for index in subgraph.inputs]
    buffer = schema.BufferT()
    buffer.data = list(metadata_flatbuffer(inputs, len(subgraph.outputs), labels, name))
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name = METADATA_NAME
    entry.buffer = len(model.buffers) - 1
    model.metadata = [item for item in model.metadata or [] if item.name.decode() != METADATA_NAME] + [entry]
    builder = _builder()
    builder.Finish(model.Pack(builder), file_identifier=TFLITE_IDENTIFIER)
    files = {VOCABULARY_FILE: "\n".join(vocabulary) + "\n"}
    if labels is not None:
        files[LABELS_FILE] = "\n".join(labels) + "\n"
    return append_files(bytes(builder.Output()), files)


def metadata_flatbuffer(inputs, outputs, labels=None, name="bert"):
    """The `ModelMetadata` flatbuffer for a model with input tensors named `inputs`."""
    schema = portable.require("mediapipe.tasks.metadata.metadata_schema_py_generated", "the MediaPipe export")
    roles = [next((role for key, role in INPUT_METADATA_NAMES.items() if key in tensor), None) for tensor in inputs]
    if sorted(filter(None, roles)) != sorted(INPUT_METADATA_NAMES.values()):
        raise ValueError(f"MediaPipe's BERT inputs are {list(INPUT_METADATA_NAMES)}; the model takes {inputs}")
    if outputs != 1:
        raise ValueError(f"MediaPipe's text tasks read one output tensor; the model has {outputs}")
    tokenizer = schema.ProcessUnitT()
    tokenizer.optionsType = schema.ProcessUnitOptions.BertTokenizerOptions
    tokenizer.options = schema.BertTokenizerOptionsT()
    tokenizer.options.vocabFile = [_file(schema, VOCABULARY_FILE, schema.AssociatedFileType.VOCABULARY)]
    output = _tensor(schema, "score" if labels is not None else "embedding")
    if labels is not None:
        output.associatedFiles = [_file(schema, LABELS_FILE, schema.AssociatedFileType.TENSOR_AXIS_LABELS)]
    subgraph = schema.SubGraphMetadataT()
    subgraph.inputTensorMetadata = [_tensor(schema, role) for role in roles]
    subgraph.outputTensorMetadata = [output]
    subgraph.inputProcessUnits = [tokenizer]
    metadata = schema.ModelMetadataT()
    metadata.name = name
    metadata.description = "BERT text " + ("classifier" if labels is not None else "embedder") + " (bert-keras)"
    metadata.subgraphMetadata = [subgraph]
    metadata.minParserVersion = MIN_PARSER_VERSION
    builder = _builder()
    builder.Finish(metadata.Pack(builder), file_identifier=METADATA_IDENTIFIER)
    return builder.Output()


def append_files(flatbuffer, files):
    """`flatbuffer` followed by an uncompressed zip of {name: text}, as MediaPipe reads
    associated files."""
    packed = io.BytesIO(flatbuffer)
    packed.seek(0, io.SEEK_END)
    with zipfile.ZipFile(packed, "a", compression=zipfile.ZIP_STORED) as archive:
        for name, text in files.items():
            archive.writestr(name, text.encode("utf-8"))
    return packed.getvalue()


def _tensor(schema, name):
    tensor = schema.TensorMetadataT()
    tensor.name = name
    tensor.content = schema.ContentT()
    tensor.content.contentPropertiesType = schema.ContentProperties.FeatureProperties
    tensor.content.contentProperties = schema.FeaturePropertiesT()
    return tensor


def _file(schema, name, kind):
    associated = schema.AssociatedFileT()
    associated.name = name
    associated.type = kind
    return associated


def _builder():
    import flatbuffers

    return flatbuffers.Builder(0)
