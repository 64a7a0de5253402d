"""The ONNX export converts the graph with the weights as inputs and attaches them as
initializers (no frozen copies): the file's only inputs are the packed ids, and its
initializers hold the Keras model's weights themselves."""

import numpy as np
import onnx
from harness import tiny_encoder, tiny_preprocessor
from onnx import numpy_helper

from bert_keras import BertClassifier
from bert_keras.models.encoder import INPUT_NAMES
from bert_keras.serving import onnx_export


def test_weights_are_initializers_and_ids_the_only_inputs(tmp_path):
    model = BertClassifier(tiny_encoder(), num_classes=3, labels=["a", "b", "c"])
    onnx_export.export_onnx(model, tiny_preprocessor(), tmp_path / "m.onnx", labels=["a", "b", "c"])
    graph = onnx.load(tmp_path / "m.onnx").graph
    assert [value.name for value in graph.input] == list(INPUT_NAMES)
    initializers = {tensor.name: numpy_helper.to_array(tensor) for tensor in graph.initializer}
    variables = model.trainable_variables + model.non_trainable_variables
    weights = {onnx_export.weight_name(index, v): v for index, v in enumerate(variables)}
    attached = {name: variable for name, variable in weights.items() if name in initializers}
    # Every matrix the encoder multiplies by is there, as it is in Keras; nothing of its size twice.
    assert {v.path for v in attached.values()} >= {v.path for v in variables if len(v.shape) == 2}
    for name, variable in attached.items():
        np.testing.assert_array_equal(initializers[name], np.asarray(variable.numpy()))
    largest = max(int(np.prod(v.shape)) for v in variables)
    assert sum(value.size == largest for value in initializers.values()) == 1
