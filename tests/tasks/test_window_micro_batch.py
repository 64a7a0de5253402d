"""Windows in micro-batches: a training step that runs a batch's windows a few at a
time takes the same step as one that runs them all at once, max pooling across windows
that fall in different micro-batches included."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from harness import ONE_LAYER_TINY, TINY, tiny_preprocessor

from bert_keras.config import BertConfig
from bert_keras.models.encoder import BertEncoder
from bert_keras.tasks.classifier import BertClassifier
from bert_keras.tasks.text_embedder import BertTextEmbedder
from bert_keras.tasks.token_classifier import BertTokenClassifier
from bert_keras.tasks.windowing import encode_windows, preprocess_windows

LONG = "the quick brown fox jumps over the lazy dog , the cat was good , it is a bad film ."
TEXTS = [LONG + " " + LONG, "a dog", LONG, "the cat"]  # 13, 1, 6 and 1 windows of 10 pieces
NO_DROPOUT = BertConfig.from_dict(
    {**ONE_LAYER_TINY.to_dict(), "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
)


def windows():
    return preprocess_windows(tiny_preprocessor(max_seq_length=10), tf.constant(TEXTS), doc_stride=3).inputs


def classifier(micro_batch, pooling, config=NO_DROPOUT):
    keras.utils.set_random_seed(0)
    return BertClassifier(
        BertEncoder(config), 3, dropout=0.0, doc_stride=3, window_pooling=pooling, window_micro_batch=micro_batch
    )


def arrays(grads):
    """Gradients as arrays (None where a variable gets none: the pooler of a token head)."""
    return [None if grad is None else tf.convert_to_tensor(grad).numpy() for grad in grads]


def assert_same(values, references):
    assert len(values) == len(references)
    for value, reference in zip(values, references):
        assert (value is None) == (reference is None)
        if reference is not None:
            np.testing.assert_allclose(value, reference, atol=1e-5 * max(1.0, np.abs(reference).max()))


def gradients(model, inputs, labels):
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = keras.losses.sparse_categorical_crossentropy(labels, model(inputs, training=True), from_logits=True)
            loss = tf.reduce_mean(loss)
        return loss, tape.gradient(loss, model.trainable_variables)

    loss, grads = step()
    return loss.numpy(), arrays(grads)


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["max", "mean"])
def test_micro_batched_gradients_equal_the_whole_batch(pooling):
    inputs, labels = windows(), tf.constant([0, 2, 1, 0])
    assert inputs["input_mask"][:, :, 0].numpy().sum(axis=1).tolist() == [13, 1, 6, 1]
    loss, expected = gradients(classifier(None, pooling), inputs, labels)
    for micro_batch in (2, 5, 21):  # the 13 windows of the first document span micro-batches
        model = classifier(micro_batch, pooling)
        micro_loss, grads = gradients(model, inputs, labels)
        np.testing.assert_allclose(micro_loss, loss, rtol=1e-6)
        assert len(grads) == len(expected)
        for grad, reference in zip(grads, expected):
            np.testing.assert_allclose(grad, reference, atol=1e-6 * max(1.0, np.abs(reference).max()))
        assert any(np.abs(grad).max() > 0 for grad in grads[:-2])  # the encoder is trained


@pytest.mark.slow
def test_a_fitted_step_updates_the_weights_as_the_whole_batch():
    inputs, labels = windows(), np.array([0, 2, 1, 0])
    updated = []
    for micro_batch in (None, 2):
        model = classifier(micro_batch, "max")
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="auto", metrics=[])
        model.fit(tf.data.Dataset.from_tensors((inputs, labels)), epochs=1, verbose=0)
        updated.append(model.get_weights())
    before = classifier(None, "max").get_weights()
    assert any(not np.allclose(a, b) for a, b in zip(updated[0], before))
    for weight, reference in zip(updated[1], updated[0]):
        np.testing.assert_allclose(weight, reference, atol=1e-6)


def test_dropout_masks_are_drawn_again_in_the_recomputation():
    """With dropout, micro-batches draw each its own masks, as an encoder called on each
    micro-batch in turn does; the recomputation draws those same masks again."""
    inputs = windows()
    real = tf.where(inputs["input_mask"][:, :, 0] > 0)
    weights = tf.random.stateless_normal([int(real.shape[0]), TINY.hidden_size], [1, 2])
    results = []
    for chunked in (True, False):
        keras.utils.set_random_seed(0)
        encoder = BertEncoder(TINY)
        with tf.GradientTape() as tape:
            if chunked:
                pooled = encode_windows(encoder, inputs, True, ("pooled_output",), micro_batch=3)[0]["pooled_output"]
                pooled = tf.gather_nd(pooled, real)
            else:
                flat = {name: tf.gather_nd(value, real) for name, value in inputs.items()}
                parts = [{name: value[start : start + 3] for name, value in flat.items()} for start in range(0, 21, 3)]
                pooled = tf.concat([encoder(part, training=True)["pooled_output"] for part in parts], 0)
            loss = tf.reduce_sum(pooled * weights)
        results.append([loss.numpy(), *arrays(tape.gradient(loss, encoder.trainable_variables))])
    assert_same(*results)


@pytest.mark.parametrize("head", [BertTokenClassifier, BertTextEmbedder])
def test_the_other_windowed_heads_keep_their_outputs(head):
    inputs = windows()
    arguments = {"num_classes": 3} if head is BertTokenClassifier else {}
    outputs = []
    for micro_batch in (None, 2):
        keras.utils.set_random_seed(0)
        model = head(BertEncoder(NO_DROPOUT), doc_stride=3, window_micro_batch=micro_batch, **arguments)
        with tf.GradientTape() as tape:
            output = model(inputs, training=True)
            loss = tf.reduce_sum(tf.sin(output))
        outputs.append([output.numpy(), *arrays(tape.gradient(loss, model.trainable_variables))])
        assert model.get_config()["window_micro_batch"] == micro_batch
    assert_same(*outputs)


def test_window_micro_batch_is_checked():
    with pytest.raises(ValueError, match="window_micro_batch must be a positive integer"):
        classifier(0, "max")


def encoded_rows(model, inputs):
    """An eager training step of `model` (forward, then backward): (its gradients, the rows
    of each encoder call)."""
    rows, call = [], model.encoder.call

    def counted(packed, *args, **kwargs):
        rows.append(int(tf.shape(packed["input_word_ids"])[0]))
        return call(packed, *args, **kwargs)

    model.encoder.call = counted
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.sin(model(inputs, training=True)))
    return arrays(tape.gradient(loss, model.trainable_variables)), rows


def test_training_runs_long_documents_in_micro_batches_by_default():
    """Without window_micro_batch a step runs each document's first window at once and the
    other windows as many at a time as the batch has documents, recomputed backward: the
    unsplit step's gradient. A batch of one window a document is run once, unsplit."""
    long = windows()  # 4 documents, 21 windows
    default, rows = encoded_rows(classifier(None, "max"), long)
    assert rows == [4] + [4, 4, 4, 4, 1] * 2
    whole, rows = encoded_rows(classifier("all", "max"), long)
    assert rows == [21]
    assert_same(default, whole)
    short = preprocess_windows(tiny_preprocessor(max_seq_length=10), tf.constant(["a dog", "the cat"]), 3).inputs
    assert [rows for rows in encoded_rows(classifier(None, "max"), short)[1] if rows] == [2]
