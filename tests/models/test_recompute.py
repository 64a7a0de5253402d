"""Recomputation: an encoder that recomputes its blocks' activations in the backward pass
(and a function recomputed in chunks) gets the gradients it gets without, dropout
included."""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from harness import ODD_TINY, random_inputs

from bert_keras.config import BertConfig
from bert_keras.models.encoder import BertEncoder, set_recompute
from bert_keras.models.recompute import recompute_gradient
from bert_keras.tasks.classifier import BertClassifier


def encoder_gradients(recompute, eager):
    keras.utils.set_random_seed(3)
    encoder = BertEncoder(ODD_TINY, recompute=recompute)  # dropout 0.1: the masks must repeat
    inputs = {name: tf.constant(value) for name, value in random_inputs(batch=3, seq=11).items()}
    weights = tf.random.stateless_normal([3, 11, ODD_TINY.hidden_size], [4, 5])

    def step():
        with tf.GradientTape() as tape:
            outputs = encoder(inputs, training=True)
            loss = tf.reduce_sum(outputs["sequence_output"] * weights) + tf.reduce_sum(outputs["pooled_output"])
        return loss, tape.gradient(loss, encoder.trainable_variables)

    loss, grads = step() if eager else tf.function(step)()
    return [loss.numpy(), *(tf.convert_to_tensor(grad).numpy() for grad in grads)]


@pytest.mark.slow
@pytest.mark.parametrize("eager", [False, True])
def test_recomputed_encoder_has_the_same_gradients(eager):
    expected = encoder_gradients(False, eager)
    actual = encoder_gradients(True, eager)
    assert len(actual) == len(expected) == 1 + len(BertEncoder(ODD_TINY).trainable_variables)
    for value, reference in zip(actual, expected):
        np.testing.assert_allclose(value, reference, atol=1e-5 * max(1.0, np.abs(reference).max()))


def test_recompute_is_saved_and_set_on_the_encoders_within():
    encoder = BertEncoder(ODD_TINY, recompute=True)
    assert BertEncoder.from_config(encoder.get_config()).recompute is True
    assert BertEncoder(ODD_TINY).get_config()["recompute"] is False
    head = BertClassifier(BertEncoder(ODD_TINY), 2)
    assert set_recompute(head) == 1 and head.encoder.recompute is True
    assert BertClassifier.from_config(head.get_config()).encoder.recompute is True


def test_chunks_give_the_whole_batch_outputs_and_gradients():
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(4)
    layer.build((None, 3))
    rows = tf.reshape(tf.range(21, dtype=tf.float32), [7, 3]) / 10.0

    def function(rows):
        return [tf.tanh(layer(rows)), tf.reduce_sum(layer(rows), axis=1)]

    results = []
    for run in (function, recompute_gradient(function, layer, chunk_size=3)):
        with tf.GradientTape() as tape:
            outputs = run(rows)
            loss = tf.reduce_sum(outputs[0] ** 2) + tf.reduce_sum(outputs[1] * tf.range(7.0))
        results.append(
            [
                *(output.numpy() for output in outputs),
                *(g.numpy() for g in tape.gradient(loss, layer.trainable_variables)),
            ]
        )
    for value, reference in zip(*results):
        np.testing.assert_allclose(value, reference, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        recompute_gradient(function, layer, chunk_size=0)


def gradient_step_peak_bytes(layers, batch, seq):
    """TensorFlow's allocator peak during a traced gradient step of a recomputing encoder,
    above what was held before it."""
    keras.utils.set_random_seed(0)
    config = BertConfig.from_dict({**ODD_TINY.to_dict(), "num_hidden_layers": layers, "max_position_embeddings": seq})
    encoder = BertEncoder(config, recompute=True)
    inputs = {name: tf.constant(value) for name, value in random_inputs(batch, seq, config).items()}

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(encoder(inputs, training=True)["sequence_output"])
        return tape.gradient(loss, encoder.trainable_variables)

    step()
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    step()
    return tf.config.experimental.get_memory_info("CPU:0")["peak"] - before


PEAKS_IN_ONE_THREAD = """
import json, sys
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(1)
from test_recompute import gradient_step_peak_bytes
print(json.dumps([gradient_step_peak_bytes(layers, 4, 128) for layers in (1, 5)]))
"""


@pytest.mark.slow
def test_recomputed_blocks_hold_no_attention_sized_tensors_each():
    """Each more block adds its input and its weights' gradients, not its attention:
    a block recomputed only once its gradient arrives draws its dropout masks then.
    Measured in a process of its own with one inter-op thread: with several, the order
    independent ops run in, and so the peak, varies from run to run (0 to 0.65 attention
    sizes a block under load; over 3 without recomputation)."""
    batch, seq = 4, 128
    attention_bytes = batch * ODD_TINY.num_attention_heads * seq * seq * 4
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", PEAKS_IN_ONE_THREAD], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    one, five = json.loads(out.stdout.strip().splitlines()[-1])
    per_block = (five - one) / 4
    assert per_block < attention_bytes / 2, (per_block, attention_bytes)
