"""BERT hyperparameters, read from and written to both released config formats."""

import dataclasses
import json
from pathlib import Path

from bert_keras.files import read_text

# Activation names as they appear in original and Hugging Face configs, mapped to
# the canonical name used here. "gelu" is the exact (erf) form of the released models.
ACTIVATION_ALIASES = {
    "gelu": "gelu",
    "gelu_exact": "gelu",
    "gelu_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_approximate": "gelu_tanh",
    "relu": "relu",
    "tanh": "tanh",
}

# Google's released sizes (Turc et al. 2019 for the small ones); intermediate = 4H.
PRESETS = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

# Keys of the original bert_config.json, in its order.
ORIGINAL_KEYS = (
    "attention_probs_dropout_prob",
    "hidden_act",
    "hidden_dropout_prob",
    "hidden_size",
    "initializer_range",
    "intermediate_size",
    "max_position_embeddings",
    "num_attention_heads",
    "num_hidden_layers",
    "type_vocab_size",
    "vocab_size",
)


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Every hyperparameter of the original `bert_config.json`, plus layer-norm epsilon."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12

    def __post_init__(self):
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in ACTIVATION_ALIASES:
            raise ValueError(
                f"BertConfig.hidden_act {self.hidden_act!r} is not supported; use one of {sorted(ACTIVATION_ALIASES)}"
            )
        object.__setattr__(self, "hidden_act", ACTIVATION_ALIASES[self.hidden_act])
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"BertConfig.{name} must be positive, got {getattr(self, name)!r}")

    @property
    def head_size(self):
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def preset(cls, name, **overrides):
        """A released size by name: tiny, mini, small, medium, base or large."""
        if name not in PRESETS:
            raise ValueError(f"Unknown BERT preset {name!r}; choose one of {list(PRESETS)}")
        layers, hidden, heads = PRESETS[name]
        sizes = dict(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            intermediate_size=4 * hidden,
        )
        return cls(**{**sizes, **overrides})

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values):
        """Builds from an original, Hugging Face or `to_dict` mapping; other keys are ignored."""
        values = dict(values)
        if "layer_norm_epsilon" in values:
            values.setdefault("layer_norm_eps", values["layer_norm_epsilon"])
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = [k for k in ORIGINAL_KEYS if k not in values and k != "hidden_act"]
        if missing:
            raise ValueError(f"BERT config is missing required keys: {missing}")
        return cls(**{k: v for k, v in values.items() if k in fields})

    @classmethod
    def from_json_file(cls, path):
        """Reads an original `bert_config.json` or a Hugging Face `config.json`."""
        return cls.from_json_values(read_config_json(path), path)

    @classmethod
    def from_json_values(cls, values, path):
        """Builds from the JSON object `read_config_json` read from `path` (named in errors)."""
        check_model_type(values, path)
        try:
            return cls.from_dict(values)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    def to_original_dict(self):
        values = {k: getattr(self, k) for k in ORIGINAL_KEYS}
        values["hidden_act"] = "gelu_new" if self.hidden_act == "gelu_tanh" else self.hidden_act
        return values

    def to_hf_dict(self):
        values = self.to_original_dict()
        values.update(
            architectures=["BertModel"],
            model_type="bert",
            layer_norm_eps=self.layer_norm_eps,
            pad_token_id=0,
            position_embedding_type="absolute",
        )
        return values

    def write_original_json(self, path):
        Path(path).write_text(json.dumps(self.to_original_dict(), indent=2) + "\n")

    def write_hf_json(self, path):
        Path(path).write_text(json.dumps(self.to_hf_dict(), indent=2) + "\n")


def check_model_type(values, where):
    """Raises ValueError naming `where` when config.json's `values` describe a model that is not BERT."""
    model_type = values.get("model_type", "bert")
    if model_type != "bert":
        raise ValueError(f"{where} describes a {model_type!r} model (config.json's model_type), not BERT")


def read_config_json(path):
    """The JSON object of a config file, read once: its checkpoint's other settings
    (labels, head class, sentence-transformers activation) come from the same read."""
    path = Path(path)
    try:
        values = json.loads(read_text(path, "BERT config"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return values
