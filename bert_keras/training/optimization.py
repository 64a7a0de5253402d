"""The optimisers of the original BERT recipe: AdamW (no bias correction) and LAMB.

AdamW takes `bias_correction=True` for the stable fine-tuning recipe of Mosbach et al.
(2021) and Zhang et al. (2021): the original's slow start without it is what makes some
fine-tuning runs on small data sets fail. Both apply weight decay inside the update, as google-research/bert's
`AdamWeightDecayOptimizer` and the LAMB paper do, and skip it (and, for LAMB, the
layer-wise trust ratio) for LayerNorm and bias variables. Keras' own `AdamW` and
`Lamb` differ: bias correction, decay outside the trust ratio, and a decay
exclusion matched against the short variable name only.
"""

import re

import keras
import tensorflow as tf
from keras import ops

from bert_keras.compat import ClipsSummedGradients, variable_index

# Matched (re.search) against `variable.path`, e.g. "bert_encoder/transformer_block_0/
# attention_layer_norm/gamma" or ".../qkv_bias": LayerNorm scales/offsets and biases.
NO_DECAY = ("layer_norm", "LayerNorm", "gamma", "beta", "bias")


@keras.saving.register_keras_serializable(package="bert_keras")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """The original schedule: `lr * step / warmup` while `step < warmup`, else linear decay.

    As in google-research/bert, the decay runs from step 0 (not from the end of
    warm-up) to `end_learning_rate` at `decay_steps`, and the first update (step 0)
    has learning rate 0 when there is a warm-up. `steps_per_update` divides the
    optimizer's iteration count, which Keras advances on every accumulated micro-batch.
    """

    def __init__(self, learning_rate, decay_steps, warmup_steps=0, end_learning_rate=0.0, steps_per_update=1):
        if decay_steps <= 0:
            raise ValueError(f"decay_steps must be positive, got {decay_steps}")
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.learning_rate = learning_rate
        self.decay_steps = decay_steps
        self.warmup_steps = warmup_steps
        self.end_learning_rate = end_learning_rate
        self.steps_per_update = steps_per_update

    def __call__(self, step):
        step = ops.cast(ops.floor_divide(step, self.steps_per_update), "float32")
        fraction = ops.minimum(step, float(self.decay_steps)) / float(self.decay_steps)
        decayed = (self.learning_rate - self.end_learning_rate) * (1.0 - fraction)
        decayed = decayed + self.end_learning_rate
        if not self.warmup_steps:
            return decayed
        warmup = self.learning_rate * step / float(self.warmup_steps)
        return ops.where(step < float(self.warmup_steps), warmup, decayed)

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "decay_steps": self.decay_steps,
            "warmup_steps": self.warmup_steps,
            "end_learning_rate": self.end_learning_rate,
            "steps_per_update": self.steps_per_update,
        }


def dense_gradient(gradient):
    """The gradient as a dense tensor: an `IndexedSlices` has its repeated rows summed.

    A gathered embedding's gradient holds one row per lookup (the token-type table:
    batch x seq rows of 2 ids), and the global norm taken over those rows is not the
    gradient's norm: clipping would then be weaker than the original's, more so as the
    batch grows. The update multiplies the gradient densely anyway.
    """
    if isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(gradient)
    return gradient


class _DecoupledDecay(ClipsSummedGradients, keras.optimizers.Optimizer):
    """Shared base: Adam moments, a per-variable decay flag from `exclude_from_decay`,
    clipping of the gradient summed over replicas (densified: `dense_gradient`)."""

    def __init__(
        self,
        learning_rate=0.001,
        weight_decay_rate=0.0,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        exclude_from_decay=NO_DECAY,
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_decay = tuple(exclude_from_decay or ())
        self._no_decay = re.compile("|".join(self.exclude_from_decay)) if self.exclude_from_decay else None

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(var_list, ["momentum", "velocity"])
        # update_step receives backend variables without a Keras path, so decide here.
        self._decays = [self.uses_weight_decay(variable) for variable in var_list]

    def gradient_to_clip(self, gradient):
        return dense_gradient(gradient)

    def uses_weight_decay(self, variable):
        """False for variables whose path matches `exclude_from_decay` (LayerNorm, biases)."""
        if not self.weight_decay_rate:
            return False
        return self._no_decay is None or not self._no_decay.search(variable.path)

    def _moments_update(self, gradient, variable):
        """Updates m and v in place; returns the (uncorrected) m and v."""
        index = variable_index(self, variable)
        m, v = self._momentums[index], self._velocities[index]
        self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * gradient)
        self.assign(v, self.beta_2 * v + (1.0 - self.beta_2) * ops.square(gradient))
        return m, v, self._decays[index]

    def _bias_corrected(self, m, v, dtype):
        """Adam's m / (1 - b1^t) and v / (1 - b2^t) for this update.

        Updates happen once per accumulation window; count those, not micro-batches.
        `iterations` already counts windows when accumulating (dividing it again gave
        step 0, and 0/0 at the first update); this update is window `iterations + 1`.
        """
        step = ops.cast(self.iterations + 1, dtype)
        return m / (1.0 - ops.power(self.beta_1, step)), v / (1.0 - ops.power(self.beta_2, step))

    def get_config(self):
        return {
            **super().get_config(),
            "weight_decay_rate": self.weight_decay_rate,
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "exclude_from_decay": list(self.exclude_from_decay),
        }


@keras.saving.register_keras_serializable(package="bert_keras")
class AdamWeightDecay(_DecoupledDecay):
    """google-research/bert's `AdamWeightDecayOptimizer`.

    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  update = m / (sqrt(v) + eps) + wd * w;
    w -= lr * update. No bias correction by default (BERT was trained without it, and the
    released fine-tuning recipes depend on its slower start). `bias_correction=True` is
    Adam's: m and v divided by 1 - b1^t and 1 - b2^t, which is Loshchilov and Hutter's
    AdamW (`torch.optim.AdamW`) with decay applied to the variables `exclude_from_decay` spares.
    """

    def __init__(self, *args, bias_correction=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.bias_correction = bool(bias_correction)

    def update_step(self, gradient, variable, learning_rate):
        gradient = ops.cast(gradient, variable.dtype)
        m, v, decays = self._moments_update(gradient, variable)
        if self.bias_correction:
            m, v = self._bias_corrected(m, v, variable.dtype)
        update = m / (ops.sqrt(v) + self.epsilon)
        if decays:
            update = update + self.weight_decay_rate * variable
        self.assign_sub(variable, ops.cast(learning_rate, variable.dtype) * update)

    def get_config(self):
        return {**super().get_config(), "bias_correction": self.bias_correction}


@keras.saving.register_keras_serializable(package="bert_keras")
class LAMB(_DecoupledDecay):
    """LAMB (You et al. 2019) as used for large-batch BERT pre-training.

    Bias-corrected Adam direction plus weight decay, scaled per variable by the trust
    ratio ||w|| / ||update|| (1 when either norm is 0). Variables excluded from decay
    are also excluded from the trust ratio, as in the reference implementation.
    """

    def update_step(self, gradient, variable, learning_rate):
        gradient = ops.cast(gradient, variable.dtype)
        m, v, decays = self._moments_update(gradient, variable)
        m_hat, v_hat = self._bias_corrected(m, v, variable.dtype)
        update = m_hat / (ops.sqrt(v_hat) + self.epsilon)
        if decays:
            update = update + self.weight_decay_rate * variable
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            u_norm = ops.sqrt(ops.sum(ops.square(update)))
            ratio = ops.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
            update = ratio * update
        self.assign_sub(variable, ops.cast(learning_rate, variable.dtype) * update)


def create_optimizer(
    learning_rate,
    num_train_steps,
    num_warmup_steps,
    optimizer="adamw",
    weight_decay=0.01,
    clipnorm=1.0,
    gradient_accumulation_steps=None,
    end_learning_rate=0.0,
    bias_correction=False,
):
    """The BERT optimiser: warm-up + linear decay, decoupled decay, global-norm clipping.

    `num_train_steps`/`num_warmup_steps` count weight updates (with gradient
    accumulation, one update per `gradient_accumulation_steps` batches). `clipnorm`
    clips the global norm of all gradients together, as the original does.
    `bias_correction`: AdamW with Adam's bias correction (LAMB always has it).
    """
    if optimizer not in ("adamw", "lamb"):
        raise ValueError(f"optimizer must be 'adamw' or 'lamb', got {optimizer!r}")
    if gradient_accumulation_steps is not None and gradient_accumulation_steps < 2:
        gradient_accumulation_steps = None  # Keras requires >= 2; 1 means no accumulation
    schedule = WarmupLinearDecay(
        learning_rate,
        decay_steps=num_train_steps,
        warmup_steps=num_warmup_steps,
        end_learning_rate=end_learning_rate,
        steps_per_update=gradient_accumulation_steps or 1,
    )
    options = dict(
        learning_rate=schedule,
        weight_decay_rate=weight_decay,
        global_clipnorm=clipnorm or None,
        gradient_accumulation_steps=gradient_accumulation_steps,
    )
    if optimizer == "lamb":
        return LAMB(**options)
    return AdamWeightDecay(**options, bias_correction=bias_correction)
