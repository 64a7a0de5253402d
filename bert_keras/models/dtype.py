"""Models in another dtype: float32 checkpoints of mixed-precision runs, bfloat16 exports."""

import warnings

from bert_keras.compat import draws_deferred

# /proc/cpuinfo flags of x86 CPUs with bfloat16 matmul units (AVX512-BF16, AMX).
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_bfloat16(cpuinfo="/proc/cpuinfo"):
    """Whether the CPU computes bfloat16 matmuls natively (None where `cpuinfo` is not
    readable, e.g. not Linux). Without such units bfloat16 is converted in software and
    runs slower than float32 (1.12x slower measured on an export, issue 23)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as file:
            text = file.read()
    except OSError:
        return None
    flags = {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[-1].split()}
    return any(flag in flags for flag in BFLOAT16_CPU_FLAGS)


def warn_if_slow_bfloat16(what, cpuinfo="/proc/cpuinfo"):
    """Warns that `what` computes in bfloat16 on this CPU without bfloat16 units."""
    if cpu_has_bfloat16(cpuinfo) is False:
        warnings.warn(
            f"{what} computes in bfloat16, but this CPU has no bfloat16 units "
            f"({' or '.join(BFLOAT16_CPU_FLAGS)}): expect it to run slower than float32",
            stacklevel=2,
        )


def with_dtype(model, dtype=None):
    """A copy of `model` whose layers compute and store weights in `dtype` (None: the
    same dtypes; a copy of the model alone, without its optimizer or compile state).

    Heads that fix their own dtype (float32 logits) keep it; nested configs (the
    encoder inside a task) are rewritten, since each carries its own policy.
    """

    def rewrite(config):
        if dtype is None:
            return config
        if isinstance(config, dict):
            return {key: dtype if key == "dtype" else rewrite(value) for key, value in config.items()}
        if isinstance(config, list):
            return [rewrite(value) for value in config]
        return config

    with draws_deferred():
        clone = type(model).from_config(rewrite(model.get_config()))
        clone.set_weights(model.get_weights())
    return clone
