import json
from pathlib import Path

import pytest
from conftest import DATA, require

from bert_keras import BertConfig


@pytest.mark.parametrize(
    "name, layers, hidden, heads",
    [
        ("tiny", 2, 128, 2),
        ("mini", 4, 256, 4),
        ("small", 4, 512, 8),
        ("medium", 8, 512, 8),
        ("base", 12, 768, 12),
        ("large", 24, 1024, 16),
    ],
)
def test_presets_are_the_released_sizes(name, layers, hidden, heads):
    config = BertConfig.preset(name)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (
        layers,
        hidden,
        heads,
    )
    assert config.intermediate_size == 4 * hidden


def test_base_preset_equals_released_base_config():
    released = BertConfig.from_json_file(require(DATA / "vocab" / "bert_config.json"))
    assert released == BertConfig.preset("base")


@pytest.mark.parametrize(
    "path",
    [
        "data/checkpoint-names/bert_config.json",
        "reference/tiny_pretraining_tf1/bert_config.json",
        "reference/tiny_pretraining_hf/config.json",
    ],
)
def test_reads_original_and_hugging_face_configs(path):
    path = require(DATA.parent / path)
    values = json.loads(path.read_text())
    config = BertConfig.from_json_file(path)
    for key in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "type_vocab_size",
        "max_position_embeddings",
    ):
        assert getattr(config, key) == values[key]
    assert config.layer_norm_eps == values.get("layer_norm_eps", 1e-12)


def test_writes_both_formats_and_reads_them_back(tmp_path):
    config = BertConfig.preset("mini", hidden_act="gelu_new", hidden_dropout_prob=0.2)
    config.write_original_json(tmp_path / "bert_config.json")
    config.write_hf_json(tmp_path / "config.json")
    hf = json.loads((tmp_path / "config.json").read_text())
    assert hf["model_type"] == "bert" and hf["layer_norm_eps"] == 1e-12
    assert "layer_norm_eps" not in json.loads((tmp_path / "bert_config.json").read_text())
    assert BertConfig.from_json_file(tmp_path / "bert_config.json") == config
    assert BertConfig.from_json_file(tmp_path / "config.json") == config


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(hidden_size=100, num_attention_heads=12), "divisible"),
        (dict(num_hidden_layers=0), "num_hidden_layers"),
        (dict(vocab_size=-5), "vocab_size"),
        (dict(hidden_act="swishy"), "hidden_act"),
        (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob"),
        (dict(intermediate_size=3.5), "intermediate_size"),
    ],
)
def test_invalid_configs_are_clear_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        BertConfig(**overrides)


def test_unknown_preset_and_bad_files(tmp_path):
    with pytest.raises(ValueError, match="preset"):
        BertConfig.preset("huge")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        BertConfig.from_json_file(tmp_path / "broken.json")
    (tmp_path / "gpt.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="not BERT"):
        BertConfig.from_json_file(tmp_path / "gpt.json")
    (tmp_path / "partial.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ValueError, match="missing required keys"):
        BertConfig.from_json_file(tmp_path / "partial.json")


def test_family_configs_read_their_own_config_json_and_check_their_fields():
    """DistilBERT's and ELECTRA's config.json (tests/fixtures/families, written by
    transformers) read as their BertConfig and write back the same fields."""
    families = Path(__file__).parent / "fixtures" / "families"
    distilbert_json = json.loads((families / "distilbert_sequence/config.json").read_text())
    distilbert = BertConfig.from_dict(distilbert_json)
    assert (distilbert.model_type, distilbert.type_vocab_size, distilbert.pooler_act) == ("distilbert", 0, "relu")
    assert (distilbert.hidden_size, distilbert.num_hidden_layers, distilbert.intermediate_size) == (16, 2, 32)
    electra_json = json.loads((families / "electra_sequence/config.json").read_text())
    electra = BertConfig.from_dict(electra_json)
    assert (electra.embedding_size, electra.embedding_width, electra.pooler_act) == (8, 8, "gelu")
    for config, original in ((distilbert, distilbert_json), (electra, electra_json)):
        assert BertConfig.from_dict(config.to_dict()) == config
        written = config.to_hf_dict()
        assert {key: original[key] for key in written} == written
    with pytest.raises(ValueError, match="a distilbert BertConfig has type_vocab_size=0"):
        BertConfig(model_type="distilbert")
    with pytest.raises(ValueError, match="embedding_size 8 != hidden_size 768 is ELECTRA's projection"):
        BertConfig(embedding_size=8)
    with pytest.raises(ValueError, match="model_type must be one of"):
        BertConfig(model_type="roberta")
