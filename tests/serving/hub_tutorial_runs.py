"""TensorFlow's BERT tutorials on a `--hub-style` export, in a process of its own.

    python hub_tutorial_runs.py PREPROCESS ENCODER OUT

`hub.KerasLayer` needs Keras 2 (`tf-keras`) on TF 2.21: `TF_USE_LEGACY_KERAS=1` must be
set before TensorFlow is imported, which the test process (Keras 3) cannot do. The code
follows the tutorials in tensorflow/text: docs/tutorials/classify_text_with_bert.ipynb
("Classify text with BERT": preprocess + trainable encoder + Dropout + Dense, fit, save,
reload, serve) and docs/tutorials/bert_glue.ipynb ("Solve GLUE tasks using BERT":
`tokenize` per segment, then `bert_pack_inputs` with `arguments=dict(seq_length=...)`).
Results go to OUT/results.npz; tests/serving/test_hub_export.py checks them.
"""

import os
import sys

import numpy as np

TEXTS = ["the quick brown fox", "a bad , bad fox !", "good", "the fox jumps", "bad", "a good fox"]
LABELS = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
PAIRS = (["the quick fox", "good"], ["a bad fox jumps over the brown fox", "bad ."])
GLUE_SEQ_LENGTH = 64


def classify_text_with_bert(preprocess, encoder_path, out):
    """The tutorial's model, fit for a few steps with the encoder trainable."""
    text_input = tf.keras.layers.Input(shape=(), dtype=tf.string, name="text")
    preprocessing = hub.KerasLayer(preprocess, name="preprocessing")
    encoder_inputs = preprocessing(text_input)
    encoder = hub.KerasLayer(encoder_path, trainable=True, name="BERT_encoder")
    net = encoder(encoder_inputs)["pooled_output"]
    net = tf.keras.layers.Dropout(0.1)(net)
    net = tf.keras.layers.Dense(1, activation=None, name="classifier")(net)
    model = tf.keras.Model(text_input, net)
    model.compile(
        optimizer=tf.keras.optimizers.Adam(1e-2),
        loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.BinaryAccuracy()],
    )
    loaded = encoder.resolved_object
    results = {
        "weights": len(encoder.weights),
        "trainable_weights": len(encoder.trainable_weights),
        "loaded_trainable_variables": len(loaded.trainable_variables),
        "encoder_before": np.concatenate([w.numpy().ravel() for w in encoder.trainable_weights]),
    }
    dataset = tf.data.Dataset.from_tensor_slices((TEXTS, LABELS)).batch(3).repeat()
    model.fit(dataset, steps_per_epoch=4, epochs=1, verbose=0)
    results["encoder_after"] = np.concatenate([w.numpy().ravel() for w in encoder.trainable_weights])

    examples = tf.constant(TEXTS)
    results["predictions"] = model(examples, training=False).numpy()
    saved = os.path.join(out, "classifier")
    model.save(saved, include_optimizer=False)
    reloaded = tf.saved_model.load(saved)
    results["reloaded"] = reloaded(examples).numpy()
    results["reloaded_serving"] = reloaded.signatures["serving_default"](examples)["classifier"].numpy()
    # Dropout inside the encoder: the same batch twice in training mode differs.
    packed = preprocessing(examples)
    for training in (True, False):
        pooled = [encoder(packed, training=training)["pooled_output"] for _ in range(2)]
        results[f"difference_training_{training}"] = float(tf.reduce_max(tf.abs(pooled[0] - pooled[1])))
    return results


def bert_glue(preprocess_path, encoder_path):
    """The GLUE tutorial's two-segment preprocessing model feeding a trainable encoder."""
    preprocess = hub.load(preprocess_path)
    input_segments = [
        tf.keras.layers.Input(shape=(), dtype=tf.string, name=name) for name in ("sentence1", "sentence2")
    ]
    tokenizer = hub.KerasLayer(preprocess.tokenize, name="tokenizer")
    segments = [tokenizer(segment) for segment in input_segments]
    packer = hub.KerasLayer(preprocess.bert_pack_inputs, arguments=dict(seq_length=GLUE_SEQ_LENGTH), name="packer")
    preprocess_model = tf.keras.Model(input_segments, packer(segments))
    packed = preprocess_model([tf.constant(PAIRS[0]), tf.constant(PAIRS[1])])
    encoder = hub.KerasLayer(encoder_path, trainable=True, name="encoder")
    outputs = encoder(packed)
    return {
        "glue_word_ids": packed["input_word_ids"].numpy(),
        "glue_type_ids": packed["input_type_ids"].numpy(),
        "glue_mask": packed["input_mask"].numpy(),
        "glue_pooled": outputs["pooled_output"].numpy(),
        "glue_layers": len(outputs["encoder_outputs"]),
    }


def main(preprocess_path, encoder_path, out):
    tf.keras.utils.set_random_seed(0)
    assert tf.keras.__name__.startswith("tf_keras"), f"expected tf-keras, got {tf.keras.__name__}"
    results = classify_text_with_bert(preprocess_path, encoder_path, out)
    results.update(bert_glue(preprocess_path, encoder_path))
    np.savez(os.path.join(out, "results.npz"), **results)


if __name__ == "__main__":
    # Before TensorFlow is imported; the test imports this module's constants without it.
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tensorflow_hub as hub
    import tensorflow_text  # noqa: F401  (registers the tf.text ops of the preprocess model)

    main(*sys.argv[1:4])
