"""The activation functions a `BertConfig` names (`hidden_act`)."""

import tensorflow as tf

ACTIVATIONS = {
    "gelu": lambda x: tf.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: tf.nn.gelu(x, approximate=True),
    "relu": tf.nn.relu,
    "tanh": tf.math.tanh,
}
