"""Gradients by recomputation: a function's activations are not kept for the backward
pass but computed again there, so memory holds one piece's at a time.

Two differences from `tf.recompute_grad` make the gradients those of the forward pass
and the memory saving real:
- Keras' dropout advances a seed variable at every call, so a plain recomputation
  draws new masks; here the layer's state (its non-trainable variables: the seeds) is
  saved before the forward pass and restored before recomputing, so the masks repeat.
- `chunk_size` runs the function over the rows of its inputs (axis 0) that many at a
  time, in the forward pass and in the recomputation, so a batch of any size holds one
  chunk's activations: the windows of long documents (`tasks.windowing`).
The recomputation waits for the incoming gradient (a data dependency, as
`tf.recompute_grad` adds): without it TensorFlow's executor is free to run it during
the forward pass, which keeps the activations after all.
"""

import tensorflow as tf


def recompute_gradient(function, layer, chunk_size=None):
    """`function(*tensors)` -> a list of tensors, that calls `layer` (whose variables it
    reads and whose seeds it advances), wrapped so that its gradient recomputes it.

    With `chunk_size` (an int, or a scalar int32 tensor, at least 1), the inputs are cut
    along axis 0 into pieces of at most that many rows and the outputs put back together;
    inputs then get no gradient (they are ids). Returns the wrapped function (same
    arguments, a list of tensors)."""
    given = chunk_size is not None and not tf.is_tensor(chunk_size)
    if given and (isinstance(chunk_size, bool) or int(chunk_size) != chunk_size or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")

    def wrapped(*inputs):
        @tf.custom_gradient
        def run(*inputs):
            state = [tf.identity(variable) for variable in layer.non_trainable_variables]
            _assign_after(inputs[0], layer.non_trainable_variables, state)
            outputs = [tf.stop_gradient(output) for output in _forward(function, inputs, chunk_size)]

            def gradient(*upstream, variables=()):
                _assign_after(upstream[0], layer.non_trainable_variables, state)
                trainable = [variable for variable in variables if variable.trainable]
                if chunk_size is None:
                    input_grads, grads = _whole_gradient(function, inputs, upstream, trainable)
                else:
                    input_grads, grads = (
                        [None] * len(inputs),
                        _chunked_gradient(function, inputs, upstream, trainable, chunk_size),
                    )
                by_variable = {variable.ref(): grad for variable, grad in zip(trainable, grads)}
                return input_grads, [by_variable.get(variable.ref()) for variable in variables]

            return outputs, gradient

        return run(*inputs)

    return wrapped


def _assign_after(tensor, variables, values):
    """Assigns `values` to `variables` once `tensor` is computed. Dropout masks depend on
    the seeds alone: without this, TensorFlow's executor may draw every block's masks
    at the start of the forward pass (or of the backward pass) and hold them all, one
    attention-sized tensor a block; after it, a block draws its masks when it runs."""
    with tf.control_dependencies([tensor]):
        for variable, value in zip(variables, values):
            variable.assign(value)


def _after(upstream, tensor):
    """`tensor` made to depend on `upstream` (adds zero; NaN only if upstream starts with one)."""
    first = tf.reshape(upstream, [-1])[:1]
    zero = tf.reduce_sum(tf.where(tf.math.is_nan(tf.cast(first, tf.float32)), 0.0, 0.0))
    return tensor + tf.cast(zero, tensor.dtype)


def _whole_gradient(function, inputs, upstream, variables):
    floats = [tensor.dtype.is_floating for tensor in inputs]
    inputs = [_after(upstream[0], tensor) for tensor in inputs]
    with tf.GradientTape() as tape:
        tape.watch([tensor for tensor, is_float in zip(inputs, floats) if is_float])
        tape.watch(variables)
        outputs = function(*inputs)
    sources = [tensor for tensor, is_float in zip(inputs, floats) if is_float] + variables
    grads = tape.gradient(outputs, sources, output_gradients=list(upstream))
    grads = iter(grads)
    input_grads = [next(grads) if is_float else None for is_float in floats]
    return input_grads, list(grads)


def _rows(inputs, index, chunk_size):
    return [tensor[index * chunk_size : (index + 1) * chunk_size] for tensor in inputs]


def _chunk_count(inputs, chunk_size):
    rows = tf.shape(inputs[0])[0]
    return tf.maximum((rows + chunk_size - 1) // chunk_size, 1)


def _forward(function, inputs, chunk_size):
    """`function` over `inputs`, `chunk_size` rows at a time (None: all at once). The first
    chunk runs outside the loop: its outputs give the arrays' dtypes."""
    if chunk_size is None:
        return list(function(*inputs))
    first = list(function(*_rows(inputs, 0, chunk_size)))
    count = _chunk_count(inputs, chunk_size)
    arrays = [
        tf.TensorArray(output.dtype, size=count, infer_shape=False, element_shape=[None, *output.shape[1:]]).write(
            0, output
        )
        for output in first
    ]

    def step(index, arrays):
        outputs = function(*_rows(inputs, index, chunk_size))
        return index + 1, [array.write(index, output) for array, output in zip(arrays, outputs)]

    _, arrays = tf.while_loop(lambda index, _: index < count, step, (tf.constant(1), arrays), parallel_iterations=1)
    return [array.concat() for array in arrays]


def _chunk_gradient(function, inputs, upstream, variables, index, chunk_size):
    """The variables' gradients from one chunk (None for those its outputs do not use)."""
    rows = _rows(inputs, index, chunk_size)
    upstream = [part[index * chunk_size : (index + 1) * chunk_size] for part in upstream]
    rows = [_after(upstream[0], tensor) for tensor in rows]
    with tf.GradientTape() as tape:
        tape.watch(variables)
        outputs = function(*rows)
    grads = tape.gradient(outputs, variables, output_gradients=upstream)
    return [None if grad is None else tf.convert_to_tensor(grad) for grad in grads]


def _chunked_gradient(function, inputs, upstream, variables, chunk_size):
    """The variables' gradients summed over chunks, recomputed in the forward pass' order
    (so each chunk draws the dropout masks it drew there)."""
    first = _chunk_gradient(function, inputs, upstream, variables, 0, chunk_size)
    used = [number for number, grad in enumerate(first) if grad is not None]
    count = _chunk_count(inputs, chunk_size)

    def step(index, total):
        grads = _chunk_gradient(function, inputs, upstream, [variables[number] for number in used], index, chunk_size)
        return index + 1, [sum_ + grad for sum_, grad in zip(total, grads)]

    total = [first[number] for number in used]
    _, total = tf.while_loop(lambda index, _: index < count, step, (tf.constant(1), total), parallel_iterations=1)
    summed = dict(zip(used, total))
    return [summed.get(number) for number in range(len(variables))]
