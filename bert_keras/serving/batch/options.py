"""`PredictOptions`: how a predictor turns rows into records, one object for the local
runner, Beam's model handler and the command line (each validated once, here)."""

import dataclasses

COMPUTE_DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class PredictOptions:
    """`batch_size` texts a model call (each batch padded to its own longest text);
    `all_scores`: every class's score in a classifier's record; `max_seq_length` and
    `doc_stride`: a Keras model's length and, for long texts, its windows (None: the
    model's own); `top_k`: a fill-mask model's fillers a mask; `compute_dtype`:
    "bfloat16" computes in bfloat16 (faster on CPUs with bfloat16 units; records stay
    float32), None the model's own dtype. An export fixed its length, windows and dtype
    when it was exported: only `batch_size` and `all_scores` apply to it."""

    batch_size: int = 32
    all_scores: bool = False
    max_seq_length: int | None = None
    doc_stride: int | None = None
    top_k: int = 5
    compute_dtype: str | None = None

    def __post_init__(self):
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.compute_dtype is not None and self.compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(f"compute_dtype must be one of {COMPUTE_DTYPES}, got {self.compute_dtype!r}")

    @property
    def fixed_by_an_export(self):
        """The options set that an export cannot change."""
        return {
            name: value
            for name in ("max_seq_length", "doc_stride", "compute_dtype")
            if (value := getattr(self, name)) is not None
        }
