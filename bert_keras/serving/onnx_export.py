"""ONNX export for ONNX Runtime: the model's `ServingSignature` on packed ids.

tf2onnx 1.17 converts a TF 2.21 graph except `Erfc` (exact GELU), which `_erfc` writes as
`1 - Erf`.

The weights never become graph constants. tf2onnx's `from_function` freezes a function's
variables into constants (`convert_variables_to_constants_v2`), then runs Grappler and its
own passes on that graph, each holding copies of the weights: BERT-base peaked at 16.5 GB
resident. Here the signature is traced as a function of the ids *and the weights*
(`model.stateless_call`), so tf2onnx converts a graph of placeholders; the weights are then
attached as ONNX initializers, one copy each (BERT-base: under 4 GB, docs/deploy.md).
ONNX Runtime folds the few ops on weights alone when it loads the file.

Ids in, not text: onnxruntime-extensions' `BertTokenizer` op gives other ids than the
original tokenizer on 0.6% of the reference texts and 23% of program messages in 10
languages (`bench/bench_tokenizer.py onnx`), tokenizes one text (or pair) a call
rather than a batch, and has no way to say which rows it got wrong; a LiteRT-style refusal
would need each differing character found and matched in the graph.
"""

import re
import tempfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bert_keras.serving.portable import check_quantize, ids_function, refuse_windows, require, write_vocab_beside
from bert_keras.serving.serving_tasks import serving_signature, trained_inputs

ONNX_OPSET = 17


def export_onnx(model, preprocessor, path, labels=None, quantize=None):
    """Writes `path` (.onnx, inputs `input_word_ids`, `input_mask`, `input_type_ids`) and
    `<stem>.vocab.txt` beside it. `labels` default to the model's own."""
    check_quantize("onnx", quantize)
    refuse_windows(model, "ONNX")
    require("tf2onnx", "the ONNX export")
    labels = trained_inputs(model, labels=labels)[1]
    proto = convert(serving_signature(model, preprocessor, labels), model)
    path = Path(path)
    if quantize is None:
        path.write_bytes(proto.SerializeToString())
    else:
        quantization = require("onnxruntime.quantization", "int8 ONNX quantization")
        with tempfile.TemporaryDirectory() as folder:
            float_path = Path(folder) / "float32.onnx"
            float_path.write_bytes(proto.SerializeToString())
            del proto
            # Per output channel: per tensor cost the SST-2 MiniLM classifier 1.0 point of dev accuracy, this 0.
            quantization.quantize_dynamic(float_path, path, weight_type=quantization.QuantType.QInt8, per_channel=True)
    write_vocab_beside(preprocessor.tokenizer, path)


def convert(signature, model):
    """The signature on ids as an ONNX ModelProto, the weights as initializers."""
    import tf2onnx

    trainable, non_trainable = model.trainable_variables, model.non_trainable_variables
    weights = {weight_name(index, variable): variable for index, variable in enumerate(trainable + non_trainable)}
    weight_specs = [tf.TensorSpec(v.shape, v.dtype, name=name) for name, v in weights.items()]

    def run_stateless(packed, values):
        split = len(trainable)
        return model.stateless_call(values[:split], values[split:], packed, training=False)[0]

    def serve(*inputs):
        ids, values = inputs[: len(specs)], list(inputs[len(specs) :])
        function, _ = ids_function(signature, lambda packed: run_stateless(packed, values))
        return function(*ids)

    specs = signature.ids_inputs()
    proto, _ = tf2onnx.convert.from_function(
        tf.function(serve, input_signature=specs + weight_specs),
        input_signature=specs + weight_specs,
        opset=ONNX_OPSET,
        custom_op_handlers={"Erfc": (_erfc, [])},
    )
    attach_weights(proto.graph, weights)
    return proto


def weight_name(index, variable):
    """A graph input name for a weight: its Keras path, made a valid TF op name and unique."""
    return f"w{index}/" + re.sub(r"[^A-Za-z0-9_./-]", "_", variable.path)


def attach_weights(graph, weights):
    """Turns the weight inputs of `graph` into initializers holding the weights' values
    (those no node reads are dropped)."""
    from onnx import numpy_helper

    used = set(_inputs_read(graph))
    inputs = [value for value in graph.input if value.name not in weights]
    for name, variable in weights.items():
        if name in used:
            graph.initializer.append(numpy_helper.from_array(np.asarray(keras.ops.convert_to_numpy(variable)), name))
    del graph.input[:]
    graph.input.extend(inputs)


def _inputs_read(graph):
    """The names every node of `graph` and of its subgraphs reads."""
    for node in graph.node:
        yield from node.input
        for attribute in node.attribute:
            for subgraph in [attribute.g] * attribute.HasField("g") + list(attribute.graphs):
                yield from _inputs_read(subgraph)


def _erfc(ctx, node, name, args):
    """tf2onnx handler: ONNX has Erf but no Erfc; erfc(x) = 1 - erf(x)."""
    from tf2onnx import utils

    erf = ctx.make_node("Erf", [node.input[0]]).output[0]
    one = ctx.make_const(utils.make_name("one"), np.array(1, np.float32)).output[0]
    node.type = "Sub"
    ctx.replace_inputs(node, [one, erf])


class OnnxPredictor:
    """An `.onnx` export in ONNX Runtime's CPU session."""

    def __init__(self, path, threads=None):
        ort = require("onnxruntime", "running an ONNX export")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.output_names = [output.name for output in self.session.get_outputs()]
        self.path = path

    def __call__(self, **inputs):
        return dict(zip(self.output_names, self.session.run(None, inputs)))
