"""A SavedModel export (`bert-keras export`, the artefact TF Serving serves) as a
predictor: its `serving_default` signature on raw strings answers what the head's
`ServingSignature` answered at export, so its outputs become the same records."""

from pathlib import Path

import tensorflow as tf

from bert_keras.serving.batch.predictor import RowPredictor
from bert_keras.serving.batch.records import RECORDS
from bert_keras.serving.export import read_head_kind, served_labels

# An export written before its head's kind was recorded (`read_head_kind`) is told by the
# output that tells each kind apart, in the order they are looked for.
KIND_OF_OUTPUT = (
    ("answer", "span"),
    ("choice", "multiple-choice"),
    ("label_ids", "classifier"),
    ("predicted", "multi-label"),
    ("score", "regression"),
    ("scores", "reranker"),
    ("embeddings", "embedder"),
    ("tag_ids", "tagger"),
    ("mask_positions", "fill-mask"),
)


def saved_model_dir(path):
    """The SavedModel at `path`: the folder itself, or the newest numbered version of a
    TF Serving model base; None when `path` holds none."""
    path = Path(path)
    if (path / "saved_model.pb").is_file():
        return path
    if path.is_dir():
        versions = [p for p in path.iterdir() if p.name.isdigit() and (p / "saved_model.pb").is_file()]
        if versions:
            return max(versions, key=lambda p: int(p.name))
    return None


class SavedModelPredictor(RowPredictor):
    """The export at `path` answering batches of rows, batched by length as the
    `.keras` path is. The export packs texts at the length it was exported with; how
    many rows that truncates is not known here, and the run says so."""

    def __init__(self, path, batch_size=32, all_scores=False):
        self.path = saved_model_dir(path)
        self.loaded = tf.saved_model.load(str(self.path))  # kept: the signature's variables live in it
        function = self.loaded.signatures["serving_default"]
        inputs = function.structured_input_signature[1]
        # Call by name; a 2-D input is a multiple-choice export's choices, which go last.
        segments = tuple(sorted(inputs, key=lambda name: (inputs[name].shape.rank, name)))
        # Outputs and no count of the pieces cut (see `truncation_notice`); run on texts.
        run = lambda *columns: (function(**dict(zip(segments, columns))), None)  # noqa: E731
        kind = export_kind(path, self.path, set(function.structured_outputs))
        super().__init__(kind, segments, served_labels(self.path), run, batch_size, all_scores)

    def truncation_notice(self, dropped):
        return (
            f"truncation: {self.path} packs texts at the length it was exported with and cuts longer ones; "
            "predict cannot count them from an export (run the .keras model to count them)"
        )


def recorded_kind(export, outputs):
    """The `head_kind` the export recorded, else the one its `outputs` tell (an older
    export); None for neither (e.g. a bare encoder)."""
    kind = read_head_kind(export)
    if kind is None:
        kind = next((kind for output, kind in KIND_OF_OUTPUT if output in outputs), None)
    return kind


def export_kind(path, export, outputs):
    """`recorded_kind`, which must be one that predict decodes."""
    kind = recorded_kind(export, outputs)
    if kind not in RECORDS:
        raise ValueError(f"{path}: an export of outputs {sorted(outputs)}, which predict does not decode")
    return kind
