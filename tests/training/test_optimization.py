"""The optimisers against numpy transcriptions of google-research/bert and the LAMB paper."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import REFERENCE, require

from bert_keras import BertConfig, BertEncoder
from bert_keras.compat import variable_index
from bert_keras.training.optimization import LAMB, AdamWeightDecay, WarmupLinearDecay, create_optimizer

# optimization.py of google-research/bert: exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]
ORIGINAL_NO_DECAY = re.compile("LayerNorm|layer_norm|bias")


def original_lr(step, init_lr, num_train_steps, num_warmup_steps):
    """create_optimizer's schedule: polynomial_decay(power=1) from step 0, linear warm-up."""
    decayed = init_lr * (1.0 - min(step, num_train_steps) / num_train_steps)
    if num_warmup_steps and step < num_warmup_steps:
        return init_lr * step / num_warmup_steps
    return decayed


def clip_by_global_norm(grads, clip_norm):
    norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads))
    return [g * clip_norm / max(norm, clip_norm) for g in grads]


def original_adamw_step(params, grads, ms, vs, lr, decays, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    """AdamWeightDecayOptimizer.apply_gradients, transcribed."""
    out = []
    for p, g, m, v, decay in zip(params, grads, ms, vs, decays):
        m[...] = b1 * m + (1 - b1) * g
        v[...] = b2 * v + (1 - b2) * g * g
        update = m / (np.sqrt(v) + eps)
        if decay:
            update = update + wd * p
        out.append(p - lr * update)
    return out


def adam_decoupled_decay_step(params, grads, ms, vs, lr, decays, t, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    """Algorithm 2 of Loshchilov and Hutter (2019), AdamW: Kingma and Ba's bias-corrected
    moments, the decay lr * wd * w of the weights before the step, BERT's exclusions."""
    out = []
    for p, g, m, v, decay in zip(params, grads, ms, vs, decays):
        m[...] = b1 * m + (1 - b1) * g
        v[...] = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        out.append(p - lr * (m_hat / (np.sqrt(v_hat) + eps) + (wd * p if decay else 0.0)))
    return out


def lamb_step(params, grads, ms, vs, lr, decays, t, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    """Algorithm 2 of You et al. (2019) with BERT's exclusions (no decay, no trust ratio)."""
    out = []
    for p, g, m, v, decay in zip(params, grads, ms, vs, decays):
        m[...] = b1 * m + (1 - b1) * g
        v[...] = b2 * v + (1 - b2) * g * g
        update = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        if decay:
            update = update + wd * p
            w_norm, u_norm = np.linalg.norm(p), np.linalg.norm(update)
            update = update * (w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0)
        out.append(p - lr * update)
    return out


def small_model():
    """A dense kernel/bias and a LayerNorm: one decayed variable, three excluded."""
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, name="dense")(inputs)
    outputs = keras.layers.LayerNormalization(name="layer_norm")(hidden)
    model = keras.Model(inputs, outputs)
    rng = np.random.default_rng(0)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    return model


@pytest.mark.parametrize("warmup", [0, 10])
def test_schedule_matches_original(warmup):
    schedule = WarmupLinearDecay(1e-3, decay_steps=100, warmup_steps=warmup)
    for step in [0, 1, 5, 9, 10, 11, 50, 99, 100, 150]:
        np.testing.assert_allclose(float(schedule(step)), original_lr(step, 1e-3, 100, warmup), rtol=1e-6, atol=1e-12)
    restored = WarmupLinearDecay.from_config(schedule.get_config())
    assert float(restored(7)) == float(schedule(7))


def test_adamw_matches_original_update_rule():
    model = small_model()
    variables = model.trainable_variables
    optimizer = create_optimizer(1e-2, num_train_steps=10, num_warmup_steps=2)
    params = [v.numpy().copy() for v in variables]
    ms = [np.zeros_like(p) for p in params]
    vs = [np.zeros_like(p) for p in params]
    decays = [not ORIGINAL_NO_DECAY.search(v.path) for v in variables]
    assert decays == [True, False, False, False]  # dense kernel only
    rng = np.random.default_rng(1)
    for step in range(4):
        # Gradients with global norm well above 1, so clipping is exercised.
        grads = [rng.normal(scale=3.0, size=p.shape).astype("float32") for p in params]
        optimizer.apply([keras.ops.convert_to_tensor(g) for g in grads], variables)
        lr = original_lr(step, 1e-2, 10, 2)
        params = original_adamw_step(params, clip_by_global_norm(grads, 1.0), ms, vs, lr, decays)
        for variable, expected in zip(variables, params):
            np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-6, atol=1e-7)


def test_bias_corrected_adamw_matches_the_paper_and_keras_adamw():
    """`bias_correction=True`, with warm-up, decay and clipping: the paper's update, and
    Keras' `AdamW` given the same schedule, exclusions and clipping (its epsilon enters
    after the bias correction, so both take a negligible one there)."""
    ours, keras_model = small_model(), small_model()
    optimizer = create_optimizer(1e-2, num_train_steps=10, num_warmup_steps=2, bias_correction=True)
    reference = keras.optimizers.AdamW(
        learning_rate=WarmupLinearDecay(1e-2, decay_steps=10, warmup_steps=2),
        weight_decay=0.01,
        epsilon=1e-12,
        global_clipnorm=1.0,
    )
    reference.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    tiny_epsilon = create_optimizer(1e-2, num_train_steps=10, num_warmup_steps=2, bias_correction=True)
    tiny_epsilon.epsilon = 1e-12
    tiny_model = small_model()
    params = [v.numpy().copy() for v in ours.trainable_variables]
    ms = [np.zeros_like(p) for p in params]
    vs = [np.zeros_like(p) for p in params]
    decays = [not ORIGINAL_NO_DECAY.search(v.path) for v in ours.trainable_variables]
    rng = np.random.default_rng(4)
    for step in range(5):
        grads = [rng.normal(scale=3.0, size=p.shape).astype("float32") for p in params]
        for opt, model in ((optimizer, ours), (reference, keras_model), (tiny_epsilon, tiny_model)):
            opt.apply([keras.ops.convert_to_tensor(g) for g in grads], model.trainable_variables)
        lr = original_lr(step, 1e-2, 10, 2)
        params = adam_decoupled_decay_step(params, clip_by_global_norm(grads, 1.0), ms, vs, lr, decays, step + 1)
        for variable, expected in zip(ours.trainable_variables, params):
            np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-7)
        for variable, expected in zip(tiny_model.trainable_variables, keras_model.trainable_variables):
            np.testing.assert_allclose(variable.numpy(), expected.numpy(), rtol=1e-5, atol=1e-7)


def test_lamb_matches_paper_with_exclusions():
    model = small_model()
    variables = model.trainable_variables
    optimizer = create_optimizer(1e-2, num_train_steps=10, num_warmup_steps=0, optimizer="lamb")
    params = [v.numpy().copy() for v in variables]
    ms = [np.zeros_like(p) for p in params]
    vs = [np.zeros_like(p) for p in params]
    decays = [not ORIGINAL_NO_DECAY.search(v.path) for v in variables]
    rng = np.random.default_rng(2)
    for step in range(3):
        grads = [rng.normal(scale=0.1, size=p.shape).astype("float32") for p in params]
        optimizer.apply([keras.ops.convert_to_tensor(g) for g in grads], variables)
        lr = original_lr(step, 1e-2, 10, 0)
        params = lamb_step(params, clip_by_global_norm(grads, 1.0), ms, vs, lr, decays, step + 1)
        for variable, expected in zip(variables, params):
            np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-7)


def test_gradient_accumulation_averages_micro_batches():
    model = small_model()
    variables = model.trainable_variables
    params = [v.numpy().copy() for v in variables]
    optimizer = create_optimizer(1e-2, num_train_steps=10, num_warmup_steps=0, gradient_accumulation_steps=2)
    rng = np.random.default_rng(3)
    grads = [[rng.normal(scale=0.1, size=p.shape).astype("float32") for p in params] for _ in range(4)]
    ms = [np.zeros_like(p) for p in params]
    vs = [np.zeros_like(p) for p in params]
    decays = [not ORIGINAL_NO_DECAY.search(v.path) for v in variables]
    for update in range(2):
        first, second = grads[2 * update], grads[2 * update + 1]
        optimizer.apply([keras.ops.convert_to_tensor(g) for g in first], variables)
        for variable, expected in zip(variables, params):  # no change after a micro-batch
            np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-6)
        optimizer.apply([keras.ops.convert_to_tensor(g) for g in second], variables)
        mean = [(a + b) / 2 for a, b in zip(first, second)]
        lr = original_lr(update, 1e-2, 10, 0)  # the schedule counts updates, not micro-batches
        params = original_adamw_step(params, clip_by_global_norm(mean, 1.0), ms, vs, lr, decays)
        for variable, expected in zip(variables, params):
            np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-7)


def test_decay_exclusions_on_the_encoder_follow_the_original_names():
    """Our variable paths differ from the original names; the decisions must not."""
    encoder = BertEncoder(BertConfig.preset("tiny"))
    optimizer = AdamWeightDecay(weight_decay_rate=0.01)
    for variable, names in encoder.original_weight_map():
        expected = not any(ORIGINAL_NO_DECAY.search(name) for name in names)
        assert optimizer.uses_weight_decay(variable) == expected, (variable.path, names)


@pytest.mark.parametrize("cls", [AdamWeightDecay, LAMB])
def test_optimizer_serialises(cls):
    optimizer = create_optimizer(
        3e-4, 100, 10, optimizer="adamw" if cls is AdamWeightDecay else "lamb", weight_decay=0.02
    )
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is cls
    if cls is AdamWeightDecay:
        assert restored.bias_correction is False
        corrected = create_optimizer(3e-4, 100, 10, bias_correction=True)
        assert keras.optimizers.deserialize(keras.optimizers.serialize(corrected)).bias_correction is True
    assert restored.weight_decay_rate == 0.02 and restored.global_clipnorm == 1.0
    schedule = restored.get_config()["learning_rate"]
    assert schedule["registered_name"] == "bert_keras>WarmupLinearDecay"
    assert isinstance(keras.optimizers.schedules.deserialize(schedule), WarmupLinearDecay)
    assert schedule == optimizer.get_config()["learning_rate"]


def test_bad_optimizer_name():
    with pytest.raises(ValueError, match="adamw"):
        create_optimizer(1e-4, 10, 1, optimizer="sgd")


@pytest.mark.parametrize("cls", [AdamWeightDecay, LAMB])
@pytest.mark.parametrize("accumulation", [None, 2])
def test_clipping_sums_the_repeated_rows_of_sparse_gradients(cls, accumulation):
    """A gathered table's gradient (IndexedSlices, one row per lookup) is clipped by the
    norm of its summed rows, as the original's dense gradient is: same update as dense."""
    table = keras.Variable(np.zeros((3, 2), "float32"), name="embeddings")
    rng = np.random.default_rng(0)
    micro_batches = []
    for _ in range(accumulation or 1):
        ids = np.array([0, 0, 0, 1, 0, 1])  # repeated ids, as token types in a batch
        values = rng.normal(size=(len(ids), 2)).astype("float32")
        dense = np.zeros((3, 2), "float32")
        np.add.at(dense, ids, values)
        micro_batches.append((ids, values, dense))
    optimizer = cls(
        learning_rate=0.1, weight_decay_rate=0.0, global_clipnorm=1.0, gradient_accumulation_steps=accumulation
    )
    for ids, values, _ in micro_batches:
        sparse = tf.IndexedSlices(tf.constant(values), tf.constant(ids), tf.constant([3, 2]))
        optimizer.apply([sparse], [table])
    mean = sum(dense for _, _, dense in micro_batches) / len(micro_batches)
    (clipped,) = clip_by_global_norm([mean], 1.0)
    assert np.linalg.norm(mean) > 1.0  # clipping is active
    ms, vs = [np.zeros((3, 2))], [np.zeros((3, 2))]
    if cls is AdamWeightDecay:
        (expected,) = original_adamw_step([np.zeros((3, 2))], [clipped], ms, vs, 0.1, [False])
    else:
        (expected,) = lamb_step([np.zeros((3, 2))], [clipped], ms, vs, 0.1, [False], t=1)
    np.testing.assert_allclose(table.numpy(), expected, rtol=1e-5, atol=1e-7)


TRAJECTORY = REFERENCE / "pretraining_trajectory"


def reference_pretrainer():
    from bert_keras.models.pretrainer import BertPretrainer

    config = BertConfig.from_json_file(require(TRAJECTORY / "config_nodrop.json"))
    return BertPretrainer.from_checkpoint(str(require(REFERENCE / "tiny_pretraining_tf1")), config=config)


def reference_batches(batch_size):
    from bert_keras.data.tfrecords import pretraining_dataset

    # In file order, repeated, as the original's input_fn read it (215 instances, no shuffle).
    return pretraining_dataset(str(TRAJECTORY / "train.tfrecord"), batch_size, shuffle_buffer=0)


@pytest.mark.parametrize("batch_size", [8, 32, 128])
def test_clipping_norm_is_the_dense_gradient_norm(batch_size):
    """The pre-trainer's token-type gradient is IndexedSlices; the optimizer must clip by
    the norm of the gradient itself, computed here densely in float64."""
    pretrainer = reference_pretrainer()
    features = next(iter(reference_batches(batch_size)))
    with tf.GradientTape() as tape:
        outputs = pretrainer(features, training=True)
        loss = pretrainer.compute_loss(x=features, y_pred=outputs)
    variables = pretrainer.trainable_variables
    grads = tape.gradient(loss, variables)
    assert any(isinstance(g, tf.IndexedSlices) for g in grads)  # the case under test
    dense = [tf.convert_to_tensor(g).numpy().astype(np.float64) for g in grads]
    norm = np.sqrt(sum(np.sum(g**2) for g in dense))
    assert norm > 1.0
    optimizer = AdamWeightDecay(learning_rate=0.0, global_clipnorm=1.0)
    optimizer.apply(grads, variables)
    # After one update m = (1 - beta_1) * clipped gradient = 0.1 * gradient / norm.
    for variable, gradient in zip(variables, dense):
        momentum = optimizer._momentums[variable_index(optimizer, variable)].numpy()
        np.testing.assert_allclose(momentum / 0.1, gradient / norm, rtol=2e-5, atol=1e-9, err_msg=variable.path)


@pytest.mark.slow
@pytest.mark.parametrize("learning_rate, key", [(1e-3, "losses_lr1e3"), (1e-4, "losses_lr1e4")])
def test_thirty_steps_follow_the_original_pretraining_trajectory(learning_rate, key):
    """google-research/bert's run_pretraining.py + AdamWeightDecayOptimizer from the same
    checkpoint on the same batches (dropout 0): (total, MLM, NSP) loss before each update."""
    original = np.load(require(TRAJECTORY / "original_losses.npz"))[key]
    pretrainer = reference_pretrainer()
    pretrainer.compile(optimizer=create_optimizer(learning_rate, num_train_steps=30, num_warmup_steps=5))
    ours = []
    for features in reference_batches(8).take(len(original)):
        pretrainer.reset_metrics()
        logs = pretrainer.train_on_batch(features, return_dict=True)
        ours.append([logs["loss"], logs["masked_lm_loss"], logs["next_sentence_loss"]])
    np.testing.assert_allclose(np.array(ours), original, rtol=1e-5)
