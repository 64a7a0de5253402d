"""The files of an export that TF Serving reads, shared by the exporter and the loaders."""

from pathlib import Path

EXTRA_DIR = "assets.extra"  # beside the SavedModel: files TF Serving reads that are not the graph
WARMUP_PATH = Path(EXTRA_DIR) / "tf_serving_warmup_requests"


def serving_signatures(meta_graph):
    """The SignatureDefs clients can call: all but the internal `__saved_model_init_op`-style ones."""
    return {name: signature for name, signature in meta_graph.signature_def.items() if not name.startswith("__")}
