"""Distillation on tiny models: students built from the teacher (layers, head, vocabulary,
labels), the soft-target loss against Keras' own KL divergence, training that moves the
student towards the teacher, cached outputs equal to on-the-fly ones, intermediate-layer
losses, every head kind, the student's export, and the errors."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf
from harness import TINY, VOCAB, assert_outputs_close, run_task_test, tiny_preprocessor

from bert_keras import BertClassifier, BertEncoder, BertTextEmbedder, BertTokenClassifier
from bert_keras.tasks.distillation import (
    TEACHER_OUTPUTS,
    BertDistiller,
    augmented_texts,
    evenly_spaced_layers,
    replacement_words,
    student_encoder,
    student_of,
    teacher_labelled,
)
from bert_keras.training.distillation import FeatureMatchingLoss, SoftTargetLoss

TEXTS = ["the film is good", "the film is bad", "a quick brown fox jumps", "the lazy dog", "it was good !", "bad"]
LABELS = np.array([1, 0, 1, 0, 1, 0])


def tiny_teacher(cls=BertClassifier, layers=4, seed=0, **kwargs):
    keras.utils.set_random_seed(seed)
    encoder = BertEncoder(dataclasses.replace(TINY, num_hidden_layers=layers))
    return cls(encoder, preprocessor=tiny_preprocessor(), **kwargs)


def logits(model, texts):
    """The model called eagerly on `texts` packed by its own preprocessor: no predict
    function to trace for a few rows."""
    return model(model.preprocessor(tf.constant(texts)), training=False)


def kl_to_teacher(teacher, student, texts, temperature=1.0):
    teacher_p = tf.nn.softmax(logits(teacher, texts) / temperature).numpy()
    student_p = tf.nn.softmax(logits(student, texts) / temperature).numpy()
    return float(np.mean(np.sum(teacher_p * (np.log(teacher_p) - np.log(student_p)), axis=-1)))


def nearest_by_sorting(teacher, word, count):
    """The `count` alphabetic pieces of highest cosine to `word` in the teacher's word
    embeddings, the word itself left out: the definition, by a full sort."""
    table = keras.ops.convert_to_numpy(teacher.encoder.embeddings.word_embeddings)
    vector = table[VOCAB.index(word)]
    cosine = {
        piece: float(table[i] @ vector / np.linalg.norm(table[i]) / np.linalg.norm(vector))
        for i, piece in enumerate(VOCAB)
        if piece.isalpha() and piece != word
    }
    return set(sorted(cosine, key=cosine.get, reverse=True)[:count])


def test_augmentation_replaces_words_by_their_nearest_in_the_teachers_embeddings():
    teacher = tiny_teacher(num_classes=2)
    nearest = replacement_words(teacher, ["film", "The", "jumps", "!", "xyz"], candidates=3)
    # "jumps" is two pieces (jump ##s), "!" is no word, "xyz" not in the vocabulary; "The" is lower-cased
    assert sorted(nearest) == ["film", "the"]
    for word, candidates in nearest.items():
        assert set(candidates) == nearest_by_sorting(teacher, word, 3)
    (copies,) = augmented_texts(teacher, (["The film jumps !"],), copies=4, probability=1.0, candidates=3)
    assert len(copies) == 4
    for text in copies:
        first, second, *rest = text.split()
        assert first in nearest["the"] and second in nearest["film"] and rest == ["jumps", "!"]
    # pairs: each column varied on its own, rows in order; words replaced about `probability` of the time
    a, b = augmented_texts(teacher, (["the film", "bad"], ["a fox", "good"]), copies=200, probability=0.25, seed=1)
    assert len(a) == len(b) == 400 and set(a[200:]) <= {"bad", *nearest_by_sorting(teacher, "bad", 15)}
    pairs = [(text, "the film") for text in a[:200]] + [(text, "a fox") for text in b[:200]]
    replaced = np.mean([x != y for text, original in pairs for x, y in zip(text.split(), original.split())])
    assert 0.18 < replaced < 0.32
    with pytest.raises(ValueError, match="copies >= 1 and 0 < probability <= 1"):
        augmented_texts(teacher, (["the film"],), copies=0)


def test_teacher_labelled_adds_unlabelled_text_and_copies_with_the_teachers_classes():
    from bert_keras.datasets.classification import Examples

    teacher = tiny_teacher(num_classes=3)
    train = Examples(["a", "b"], (["the film", "a fox"],), [2, 2])
    assert teacher_labelled(teacher, train) is train  # nothing to add
    labelled = teacher_labelled(teacher, train, (["the lazy dog", "bad"],), augment=2, probability=1.0, seed=3)
    (copies,) = augmented_texts(teacher, train.texts, 2, 1.0, seed=3)
    added = ["the lazy dog", "bad", *copies]
    assert labelled.texts == (["the film", "a fox", *added],) and len(labelled.guids) == 2 + 2 + 2 * 2
    assert labelled.labels == [2, 2, *np.argmax(teacher.predict(np.array(added, object), verbose=0), -1).tolist()]
    with pytest.raises(ValueError, match="2 column"):
        teacher_labelled(teacher, train, (["a"], ["b"]))
    with pytest.raises(ValueError, match="one list of texts per segment"):
        teacher_labelled(teacher, train, ["the lazy dog"])  # a bare list would be read letter by letter
    with pytest.raises(ValueError, match="no labels"):
        teacher_labelled(teacher, Examples(["a"], (["the film"],), None), augment=1)
    with pytest.raises(ValueError, match="classifier's classes; the teacher is a BertTextEmbedder"):
        teacher_labelled(tiny_teacher(BertTextEmbedder), train, augment=1)


def test_evenly_spaced_layers_are_distilberts():
    # DistilBERT's extraction script keeps layers 0, 2, 4, 7, 9, 11 of BERT-base.
    assert evenly_spaced_layers(12, 6) == [0, 2, 4, 7, 9, 11]
    assert evenly_spaced_layers(6, 3) == [0, 3, 5]
    assert evenly_spaced_layers(6, 1) == [5]
    assert evenly_spaced_layers(4, 4) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="7 layers from a teacher of 6"):
        evenly_spaced_layers(6, 7)


def test_teacher_k_student_copies_layers_head_and_everything_served():
    teacher = tiny_teacher(num_classes=3, labels=["a", "b", "c"], segments=("text",))
    teacher.trainable = False  # a frozen teacher still gives a trainable student
    student = student_of(teacher, "teacher:2")
    assert type(student) is BertClassifier and student.trainable
    assert student.labels == ["a", "b", "c"] and student.segments == ("text",) and student.num_classes == 3
    assert student.preprocessor.tokenizer.vocabulary == VOCAB and student.preprocessor is not teacher.preprocessor
    assert student.encoder.config == dataclasses.replace(teacher.encoder.config, num_hidden_layers=2)
    for block, index in zip(student.encoder.transformer_blocks, [0, 3]):
        for a, b in zip(block.get_weights(), teacher.encoder.transformer_blocks[index].get_weights()):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(student.logits.kernel.numpy(), teacher.logits.kernel.numpy())
    # All of the teacher's layers: the same model, output for output.
    whole = student_of(teacher, "teacher:4")
    assert_outputs_close(logits(whole, TEXTS), logits(teacher, TEXTS), atol=0)


def test_preset_and_checkpoint_students(tmp_path):
    teacher = tiny_teacher(num_classes=2)
    student = student_of(teacher, "tiny")  # BERT-Tiny's sizes, the teacher's vocabulary
    config = student.encoder.config
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (2, 128, len(VOCAB))
    path = tmp_path / "encoder.keras"
    BertEncoder(dataclasses.replace(TINY, num_hidden_layers=1)).save(path)
    assert student_encoder(teacher, str(path)).config.num_hidden_layers == 1
    BertEncoder(dataclasses.replace(TINY, vocab_size=99)).save(tmp_path / "other.keras")
    with pytest.raises(ValueError, match="other.keras: vocabulary of 99 pieces"):
        student_encoder(teacher, str(tmp_path / "other.keras"))
    with pytest.raises(ValueError, match="teacher:K"):
        student_of(teacher, "teacher:three")


def test_soft_target_loss_is_keras_kl_divergence_times_t_squared():
    rng = np.random.default_rng(0)
    teacher, student = rng.normal(size=(2, 2, 5, 4)) * 3
    for temperature in (1.0, 2.0, 4.0):
        expected = keras.losses.KLDivergence()(
            tf.nn.softmax(teacher / temperature), tf.nn.softmax(student / temperature)
        )
        actual = SoftTargetLoss(temperature)(teacher, student)
        np.testing.assert_allclose(actual, expected * temperature**2, rtol=1e-5)
    # A mask as sample_weight: the mean over the kept rows only.
    mask = np.array([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], "float32")
    kept = SoftTargetLoss(2.0)(teacher[mask > 0], student[mask > 0])
    np.testing.assert_allclose(SoftTargetLoss(2.0)(teacher, student, mask), kept, rtol=1e-5)
    np.testing.assert_allclose(
        FeatureMatchingLoss()(teacher, student), keras.losses.MeanSquaredError()(teacher, student), rtol=1e-6
    )


@pytest.mark.slow
def test_distillation_brings_the_student_to_the_teacher_and_leaves_the_teacher():
    teacher = tiny_teacher(num_classes=2, seed=1)
    teacher.logits.kernel.assign(teacher.logits.kernel * 200)  # confident, far from the student's start
    student = student_of(teacher, "tiny")
    frozen = [w.copy() for w in teacher.get_weights()]
    before = kl_to_teacher(teacher, student, TEXTS)
    distiller = BertDistiller(teacher, student, alpha=1.0, temperature=1.0)
    distiller.compile(optimizer=keras.optimizers.Adam(3e-3))
    # 3 epochs of 3 steps bring the KL divergence to about 5% of its start (8 epochs: 2%).
    history = distiller.fit(TEXTS * 4, LABELS.repeat(4), batch_size=8, epochs=3, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    after = kl_to_teacher(teacher, student, TEXTS)
    assert after < 0.2 * before, (before, after)
    for a, b in zip(frozen, teacher.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_cached_teacher_outputs_give_the_on_the_fly_loss():
    teacher = tiny_teacher(num_classes=2)
    distiller = BertDistiller(teacher, student_of(teacher, "teacher:2"), alpha=0.7, temperature=3.0)
    distiller.compile()
    packed = distiller.preprocessor(tf.constant(TEXTS))
    y_pred = distiller(packed, training=False)
    on_the_fly = distiller.compute_loss(packed, LABELS, y_pred, training=False)
    cached = {"labels": LABELS, TEACHER_OUTPUTS: teacher.predict(TEXTS, verbose=0)}
    np.testing.assert_allclose(distiller.compute_loss(packed, cached, y_pred, training=False), on_the_fly, rtol=1e-5)
    # By hand: alpha * KL at T (times T^2) + (1 - alpha) * cross-entropy.
    soft = SoftTargetLoss(3.0)(cached[TEACHER_OUTPUTS], y_pred)
    hard = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(LABELS, y_pred)
    np.testing.assert_allclose(on_the_fly, 0.7 * soft + 0.3 * hard, rtol=1e-5)
    # The student's regularization losses are added.
    kernel = distiller.student.logits.kernel
    kernel.regularizer = keras.regularizers.L2(0.5)
    regularized = distiller.compute_loss(packed, LABELS, y_pred, training=False)
    np.testing.assert_allclose(regularized, on_the_fly + 0.5 * np.sum(np.square(kernel.numpy())), rtol=1e-5)


@pytest.mark.slow
def test_hidden_state_and_attention_losses_train_the_projections():
    teacher = tiny_teacher(num_classes=2)
    student = student_of(teacher, "tiny")  # width 128 against the teacher's 16: projected
    distiller = BertDistiller(teacher, student, alpha=0.5, hidden_weight=1.0, attention_weight=1.0)
    assert len(distiller.projections) == 2 and distiller.layer_map == [0, 3]
    projections = [p.kernel.numpy().copy() for p in distiller.projections]
    distiller.compile(optimizer=keras.optimizers.Adam(1e-3))
    packed = distiller.preprocessor(tf.constant(TEXTS))
    distiller(packed, training=True)
    loss_with = distiller.compute_loss(packed, LABELS, distiller(packed, training=True), training=True)
    plain = BertDistiller(teacher, student, alpha=0.5)
    plain.compile()
    assert float(loss_with) > float(plain.compute_loss(packed, LABELS, plain(packed, training=True)))
    history = distiller.fit(TEXTS, LABELS, batch_size=3, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert all(not np.array_equal(a, p.kernel.numpy()) for a, p in zip(projections, distiller.projections))
    with pytest.raises(ValueError, match="2 attention heads; the student has 4"):
        BertDistiller(teacher, student_of(teacher, "mini"), attention_weight=1.0)


@pytest.mark.slow
def test_tagger_and_embedder_students():
    teacher = tiny_teacher(BertTokenClassifier, num_classes=3)
    words = tf.ragged.constant([text.split() for text in TEXTS])
    tags = tf.ragged.constant([[i % 3 for i, _ in enumerate(text.split())] for text in TEXTS])
    distiller = BertDistiller(teacher, student_of(teacher, "teacher:2"), alpha=0.5)
    distiller.compile(optimizer=keras.optimizers.Adam(1e-3))
    assert np.isfinite(distiller.fit(words, tags, batch_size=3, epochs=1, verbose=0).history["loss"]).all()

    embedder = tiny_teacher(BertTextEmbedder)
    student = student_of(embedder, "teacher:1")
    rng = np.random.default_rng(0)
    student.encoder.set_weights([w + rng.normal(0, 0.3, w.shape) for w in student.encoder.get_weights()])
    distiller = BertDistiller(embedder, student, alpha=1.0)
    assert isinstance(distiller.soft_loss, FeatureMatchingLoss)
    distiller.compile(optimizer=keras.optimizers.Adam(1e-3))
    before = np.mean((embedder.encode(TEXTS) - distiller.student.encode(TEXTS)) ** 2)
    distiller.fit((TEXTS, TEXTS[::-1]), None, batch_size=3, epochs=4, verbose=0)
    after = np.mean((embedder.encode(TEXTS) - distiller.student.encode(TEXTS)) ** 2)
    assert after < before


@pytest.mark.slow
def test_the_student_exports_and_serves_like_the_teacher(tmp_path):
    teacher = tiny_teacher(num_classes=2, labels=["bad", "good"])
    teacher.compile(optimizer=keras.optimizers.Adam(1e-3))
    teacher.fit(TEXTS, LABELS, batch_size=3, epochs=1, verbose=0)
    distiller = BertDistiller(teacher, student_of(teacher, "teacher:2"))
    distiller.compile(optimizer=keras.optimizers.Adam(1e-3))
    distiller.fit(TEXTS, LABELS, batch_size=3, epochs=1, verbose=0)
    student = distiller.student

    def check(model, out):
        probabilities = tf.nn.softmax(model.predict(TEXTS[:2], verbose=0)).numpy()
        np.testing.assert_allclose(out["probabilities"], probabilities, atol=1e-5)
        assert [label.decode() for label in out["labels"]] == [["bad", "good"][i] for i in probabilities.argmax(-1)]

    run_task_test(
        student, tmp_path, np.array(TEXTS), {"text": TEXTS[:2]}, check, export_kwargs={"labels": student.labels}
    )
    with pytest.raises(NotImplementedError, match="save distiller.student"):
        distiller.get_config()


def test_mismatched_teacher_and_student_are_errors():
    teacher = tiny_teacher(num_classes=2)
    with pytest.raises(TypeError, match="the student is a BertTokenClassifier, the teacher a BertClassifier"):
        BertDistiller(teacher, tiny_teacher(BertTokenClassifier, num_classes=2))
    other = BertClassifier(BertEncoder(dataclasses.replace(TINY, vocab_size=40)), 2)
    with pytest.raises(ValueError, match="distillation needs the teacher's vocabulary"):
        BertDistiller(teacher, other)
    with pytest.raises(ValueError, match="alpha"):
        BertDistiller(teacher, student_of(teacher, "teacher:1"), alpha=1.5)


MIRRORED = """
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import dataclasses, keras, numpy as np
sys.path.insert(0, "tests")
from harness import TINY, tiny_preprocessor
from bert_keras import BertClassifier, BertEncoder
from bert_keras.tasks.distillation import BertDistiller, student_of
from bert_keras.training import distribute

texts = ["the film is good", "the film is bad", "a quick brown fox jumps", "the lazy dog"] * 2
labels = np.array([1, 0, 1, 0] * 2)
config = dataclasses.replace(TINY, num_hidden_layers=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
keras.utils.set_random_seed(0)
teacher = BertClassifier(BertEncoder(config), 2, dropout=0.0, preprocessor=tiny_preprocessor(seq_length=16))
student = student_of(teacher, "tiny")
weights = teacher.get_weights(), student.get_weights()
packed = teacher.preprocessor(tf.constant(texts))
results = {}
for name, strategy in (("one_device", distribute.resolve_strategy("default")),
                       ("mirrored", distribute.resolve_strategy("mirrored", devices=["/cpu:0", "/cpu:1"]))):
    with strategy.scope():
        keras.utils.set_random_seed(1)
        t = BertClassifier.from_config(teacher.get_config()); t.set_weights(weights[0])
        s = BertClassifier.from_config(student.get_config()); s.set_weights(weights[1])
        d = BertDistiller(t, s, alpha=0.5, hidden_weight=1.0, attention_weight=1.0)
        d.compile(optimizer=keras.optimizers.SGD(0.1))
    if name == "mirrored":
        for p, w in zip(d.projections, projections):
            p.set_weights(w)
    projections = [p.get_weights() for p in d.projections]
    batches = tf.data.Dataset.from_tensor_slices((packed, labels)).batch(8).repeat()
    data = distribute.distribute_dataset(
        strategy, lambda _, context: distribute.split_global_batches(batches, 8, context, 16), 8
    )
    history = d.fit(data, epochs=3, steps_per_epoch=1, verbose=0)
    results[name] = {"loss": history.history["loss"], "weights": [w.tolist() for w in s.get_weights()[-6:]]}
print(json.dumps(results))
"""


@pytest.mark.slow
def test_mirrored_distillation_equals_one_device():
    """The same global batches on 2 replicas (logical CPUs) train the student as one device:
    the soft, hard, hidden-state and attention losses are scaled per replica alike."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", MIRRORED], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(results["mirrored"]["loss"], results["one_device"]["loss"], rtol=1e-4)
    for a, b in zip(results["mirrored"]["weights"], results["one_device"]["weights"]):
        np.testing.assert_allclose(a, b, atol=1e-5)
