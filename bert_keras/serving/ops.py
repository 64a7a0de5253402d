"""Which TensorFlow Serving release can run an export: the non-core ops it uses and the
oldest model server that links each of them."""

from pathlib import Path

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

# Oldest TensorFlow Serving release whose model server links each tf.text op we may emit.
# tf.text's first ops were linked in 2019 (tensorflow/serving#1405, first in 2.1);
# FastWordpiece came with TF Text 2.10 (#2121), FastBertNormalize with 2.12 (#2064, #2119);
# RoundRobinTrim is missing from servers that embed TF Text 2.12 (#4057) until 2.20.
SERVING_RELEASE_OF_OP = {
    "NormalizeUTF8": "2.1",
    "NormalizeUTF8WithOffsetsMap": "2.1",
    "RegexSplitWithOffsets": "2.1",
    "WordpieceTokenizeWithOffsets": "2.1",
    "CaseFoldUTF8": "2.1",
    "FastWordpieceTokenizeWithOffsets": "2.10",
    "FastBertNormalize": "2.12",
    "TFText>RoundRobinTrim": "2.20",
}


def graph_ops(export_path):
    """Every op type in the exported graph and its function library."""
    saved_model = saved_model_pb2.SavedModel.FromString((Path(export_path) / "saved_model.pb").read_bytes())
    ops = set()
    for meta_graph in saved_model.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return ops


def check_serving_ops(export_path, serving_release="2.12"):
    """Raises unless every non-core op of the export is linked by that TF Serving release.

    Returns {op: oldest release} for the non-core ops found. Core ops are those in
    `tf.raw_ops`, which TensorFlow generates from its own op registry at build time.
    """
    extra = sorted(graph_ops(export_path) - set(dir(tf.raw_ops)))
    unknown = [op for op in extra if op not in SERVING_RELEASE_OF_OP]
    if unknown:
        raise ValueError(f"{export_path} uses ops of unknown TF Serving support: {unknown}")
    target = release_version(serving_release)
    too_new = {op: SERVING_RELEASE_OF_OP[op] for op in extra if release_version(SERVING_RELEASE_OF_OP[op]) > target}
    if too_new:
        raise ValueError(f"{export_path} needs a newer TF Serving than {serving_release}: {too_new}")
    return {op: SERVING_RELEASE_OF_OP[op] for op in extra}


def release_version(text):
    """ "2.12" -> (2, 12), comparable."""
    return tuple(int(part) for part in text.split("."))
