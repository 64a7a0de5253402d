"""BERT hyperparameters, read from and written to both released config formats, and
those of the BERT-architecture families (DistilBERT, ELECTRA) in their config.json."""

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

# The encoder families read and written: BERT, and those that are BERT's encoder with a
# difference in its embeddings or head (`BertConfig.model_type`).
MODEL_TYPES = ("bert", "distilbert", "electra")
# DistilBERT's config.json names -> BertConfig's (it has no token types; LayerNorm eps is fixed at 1e-12).
DISTILBERT_KEYS = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "hidden_dim": "intermediate_size",
    "activation": "hidden_act",
    "dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
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
    """Every hyperparameter of the original `bert_config.json`, plus layer-norm epsilon
    and the family: `model_type` "distilbert" (no token-type embeddings:
    `type_vocab_size=0`; a ReLU pooler, its classifier's `pre_classifier`) or "electra"
    (embeddings `embedding_size` wide, projected to `hidden_size` when they differ; a
    GELU pooler, its classifier's `classifier.dense`)."""

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
    model_type: str = "bert"
    embedding_size: int | None = None

    def __post_init__(self):
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            _check_integer(name, getattr(self, name), 1)
        _check_integer("type_vocab_size", self.type_vocab_size, 0)  # 0: no token types (DistilBERT)
        if self.embedding_size is not None:
            _check_integer("embedding_size", self.embedding_size, 1)
        self._check_family()
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

    def _check_family(self):
        """Each family's weights exist in its own checkpoints: DistilBERT has no token types,
        only ELECTRA an embedding projection."""
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"BertConfig.model_type must be one of {list(MODEL_TYPES)}, got {self.model_type!r}")
        if self.model_type == "distilbert" and self.type_vocab_size:
            raise ValueError(
                f"a distilbert BertConfig has type_vocab_size=0 (no token types), got {self.type_vocab_size}"
            )
        if self.model_type != "electra" and self.embedding_size not in (None, self.hidden_size):
            raise ValueError(
                f"embedding_size {self.embedding_size} != hidden_size {self.hidden_size} is ELECTRA's projection; "
                f"a {self.model_type} BertConfig has none"
            )

    @property
    def head_size(self):
        return self.hidden_size // self.num_attention_heads

    @property
    def embedding_width(self):
        """The width of the embedding tables: `embedding_size`, else `hidden_size`."""
        return self.embedding_size or self.hidden_size

    @property
    def pooler_act(self):
        """The pooler's activation: BERT's tanh; the dense + activation that DistilBERT's
        (ReLU) and ELECTRA's (GELU) sequence classifiers put on [CLS]."""
        return {"bert": "tanh", "distilbert": "relu", "electra": "gelu"}[self.model_type]

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
        """Builds from an original, Hugging Face (BERT, DistilBERT, ELECTRA) or `to_dict`
        mapping; other keys are ignored."""
        values = dict(values)
        if values.get("model_type") == "distilbert":
            values = {DISTILBERT_KEYS.get(key, key): value for key, value in values.items()}
            values.setdefault("type_vocab_size", 0)
        if values.get("model_type") == "electra" and values.get("embedding_size") == values.get("hidden_size"):
            values.pop("embedding_size")  # no projection
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
        if self.model_type != "bert":
            raise ValueError(f"a {self.model_type} model has no original TF1 bert_config.json; write it as hf or keras")
        return self._original_values()

    def _original_values(self):
        values = {k: getattr(self, k) for k in ORIGINAL_KEYS}
        values["hidden_act"] = "gelu_new" if self.hidden_act == "gelu_tanh" else self.hidden_act
        return values

    def to_hf_dict(self):
        """config.json's fields in the model's own family (transformers' BertConfig,
        DistilBertConfig or ElectraConfig)."""
        values = self._original_values()
        values["pad_token_id"] = 0
        if self.model_type == "distilbert":
            keys = {bert: distilbert for distilbert, bert in DISTILBERT_KEYS.items()}
            values = {keys.get(key, key): value for key, value in values.items() if key != "type_vocab_size"}
            return {**values, "model_type": "distilbert", "sinusoidal_pos_embds": False}
        values.update(model_type=self.model_type, layer_norm_eps=self.layer_norm_eps)
        if self.model_type == "electra":
            return {**values, "embedding_size": self.embedding_width}
        return {**values, "architectures": ["BertModel"], "position_embedding_type": "absolute"}

    def write_original_json(self, path):
        Path(path).write_text(json.dumps(self.to_original_dict(), indent=2) + "\n")

    def write_hf_json(self, path):
        Path(path).write_text(json.dumps(self.to_hf_dict(), indent=2) + "\n")


def _check_integer(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a non-negative" if minimum == 0 else "a positive"
        raise ValueError(f"BertConfig.{name} must be {kind} integer, got {value!r}")


def check_model_type(values, where):
    """Raises ValueError naming `where` when config.json's `values` describe a model that is
    not of a BERT family bert-keras reads (`MODEL_TYPES`)."""
    model_type = values.get("model_type", "bert")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"{where} describes a {model_type!r} model (config.json's model_type), not BERT "
            f"(bert-keras reads {', '.join(MODEL_TYPES)})"
        )


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
