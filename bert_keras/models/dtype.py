"""Models in another dtype: float32 checkpoints of mixed-precision runs, bfloat16 exports."""


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

    clone = type(model).from_config(rewrite(model.get_config()))
    clone.set_weights(model.get_weights())
    return clone
