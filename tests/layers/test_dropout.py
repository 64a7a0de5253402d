"""`PhiloxDropout`: the rate, the scale and a fresh mask on every call, eager and under XLA."""

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.layers.dropout import PhiloxDropout


@pytest.mark.parametrize("jit_compile", [False, True])
def test_philox_dropout_rate_scale_and_fresh_masks(jit_compile):
    dropout = PhiloxDropout(0.1)
    ones = tf.ones((400, 250))
    draw = tf.function(lambda x: dropout(x, training=True), jit_compile=jit_compile)
    first, second = draw(ones).numpy(), draw(ones).numpy()
    for sample in (first, second):
        # 100,000 draws: the dropped fraction is 0.1 within 5 standard deviations (0.0047).
        assert abs((sample == 0).mean() - 0.1) < 0.0047
        np.testing.assert_allclose(np.unique(sample), [0.0, 1 / 0.9], rtol=1e-6)
    assert (first != second).mean() > 0.1  # a new mask on every call
    np.testing.assert_array_equal(dropout(ones, training=False), ones)
    with pytest.raises(ValueError, match="noise_shape"):
        PhiloxDropout(0.1, noise_shape=(1, 250))
    with pytest.raises(ValueError, match="rate"):
        PhiloxDropout(1.0)
    odd = draw(tf.ones((3, 5, 7))).numpy()  # an odd size: the last word's high half unused
    assert odd.shape == (3, 5, 7) and set(np.unique(odd)) <= {0.0, np.float32(1 / 0.9)}
