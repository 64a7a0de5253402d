"""`.keras` files saved before the heads moved into `bert_keras.tasks` still load.

The fixtures were written by `tests/fixtures/make_fixtures.py` with the code of commit
43d608d (classes then in `bert_keras.classifier`, ...), every weight set by a formula
(`fixture_models.fixture_weights`). The expectation is not a recorded output: the same
models built by today's code with the same weights set by hand must give identical
outputs, and the loaded weights must be exactly the formula's."""

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from fixture_models import TEXTS, fixture_weights, tiny_classifier, tiny_pretrainer

from bert_keras import BertClassifier, BertEncoder, BertPretrainer, BertTextEmbedder
from bert_keras.models.saving import load_keras_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def without_names(config):
    """A config without layer names, which Keras numbers by how many came before."""
    if isinstance(config, dict):
        return {key: without_names(value) for key, value in config.items() if key != "name"}
    if isinstance(config, list):
        return [without_names(value) for value in config]
    return config


@pytest.mark.parametrize(
    "name, build", [("classifier_v0.keras", tiny_classifier), ("pretrainer_v0.keras", tiny_pretrainer)]
)
def test_old_keras_file_equals_the_same_model_built_today(name, build):
    loaded = keras.saving.load_model(FIXTURES / name)
    fresh = build()
    assert type(loaded) is type(fresh) and type(loaded) in (BertClassifier, BertPretrainer)
    assert without_names(loaded.get_config()) == without_names(fresh.get_config())
    expected = fixture_weights([w.shape for w in fresh.get_weights()])
    for stored, value in zip(loaded.get_weights(), expected, strict=True):
        np.testing.assert_array_equal(stored, value)
    if isinstance(fresh, BertClassifier):
        inputs = loaded.preprocessor(tf.constant(TEXTS))
        np.testing.assert_array_equal(
            inputs["input_word_ids"], fresh.preprocessor(tf.constant(TEXTS))["input_word_ids"]
        )
        texts = np.array(TEXTS)
        np.testing.assert_array_equal(loaded.predict(texts, verbose=0), fresh.predict(texts, verbose=0))
    else:
        inputs = tiny_classifier().preprocessor(tf.constant(TEXTS))
        inputs["masked_lm_positions"] = tf.constant([[1, 2]] * len(TEXTS))
        tf.nest.map_structure(np.testing.assert_array_equal, loaded(inputs), fresh(inputs))


def test_the_keras_loader_names_the_file_and_both_classes():
    """Every entry point that reads a `.keras` file goes through `load_keras_file`, which
    refuses a model of another class with the file's name instead of a wrong model."""
    path = FIXTURES / "classifier_v0.keras"
    assert type(load_keras_file(path, BertClassifier)) is BertClassifier
    for load, wanted in (
        (BertEncoder.from_checkpoint, "BertEncoder"),
        (BertPretrainer.from_checkpoint, "BertPretrainer"),
        (BertTextEmbedder.from_checkpoint, "BertTextEmbedder"),
    ):
        with pytest.raises(ValueError, match=f"classifier_v0.keras holds a BertClassifier, not a {wanted}"):
            load(path)
