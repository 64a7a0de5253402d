"""A SavedModel export (`bert-keras export`, the artefact TF Serving serves) as a
predictor: its `serving_default` signature on raw strings answers what the head's
`ServingSignature` answered at export, so its outputs become the same records."""

from pathlib import Path

import tensorflow as tf

from bert_keras.serving.batch.predictor import BatchPredictor
from bert_keras.serving.export import served_labels

# The output that tells each kind of export apart, in the order they are looked for.
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


class SavedModelPredictor(BatchPredictor):
    """The export at `path` answering batches of rows, batched by length as the
    `.keras` path is. The export packs texts at the length it was exported with; how
    many rows that truncates is not known here, and the run says so."""

    def __init__(self, path, batch_size=32, all_scores=False):
        self.path = saved_model_dir(path)
        self.loaded = tf.saved_model.load(str(self.path))
        function = self.loaded.signatures["serving_default"]
        outputs = set(function.structured_outputs)
        kinds = [kind for output, kind in KIND_OF_OUTPUT if output in outputs]
        if not kinds:
            raise ValueError(f"{path}: an export of outputs {sorted(outputs)}, which predict does not decode")
        self.kind = kinds[0]
        self.batch_size, self.all_scores, self.windows = batch_size, all_scores, True
        self.labels = served_labels(self.path)
        inputs = function.structured_input_signature[1]
        # Call by name; a 2-D input is a multiple-choice export's choices, which go last.
        self.segments = tuple(sorted(inputs, key=lambda name: (inputs[name].shape.rank, name)))
        self.choices = self.kind == "multiple-choice"
        # Outputs and no count of the pieces cut (see `truncation_notice`); run on texts.
        self._run = lambda *columns: (function(**dict(zip(self.segments, columns))), None)
        self._tokenize = None

    def truncation_notice(self, dropped):
        return (
            f"truncation: {self.path} packs texts at the length it was exported with and cuts longer ones; "
            "predict cannot count them from an export (run the .keras model to count them)"
        )
