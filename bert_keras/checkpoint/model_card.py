"""The model card (README.md) of a Hugging Face folder bert-keras writes: the Hub's YAML
metadata (`library_name`, `pipeline_tag` by the kind of head, `base_model`, `tags`),
then the labels, the dev metrics and the command of the run that trained it, read from
the files a `finetune` or `distill` run leaves beside its model (`run.json`,
`eval_results.json`, `best_metrics.json`), and how to load it."""

import json
import shlex
from pathlib import Path

from bert_keras.checkpoint.text_files import read_json_object

README = "README.md"
RUN_RECORD = "run.json"
LIBRARY = "bert-keras"
# The Hub's pipeline tag of each kind of head (`head_kind`; None: a bare encoder).
PIPELINE_TAGS = {
    "classifier": "text-classification",
    "multi-label": "text-classification",
    "regression": "text-classification",
    "tagger": "token-classification",
    "span": "question-answering",
    "fill-mask": "fill-mask",
    "embedder": "sentence-similarity",
    "reranker": "text-ranking",
    "multiple-choice": None,  # the Hub has no pipeline for it
    None: "feature-extraction",
}
# Heads whose folder sentence-transformers loads (SentenceTransformer, CrossEncoder).
SENTENCE_TRANSFORMERS = ("embedder", "reranker")


def write_model_card(folder, model, run_folder=None, repo_id=None):
    """Writes `folder`/README.md for `model` (the model the folder holds), with what the
    run in `run_folder` recorded (None: no run); `repo_id` names it in the examples.
    Returns the `huggingface_hub.ModelCard`."""
    from huggingface_hub import ModelCard, ModelCardData

    folder = Path(folder)
    run = read_run(run_folder)
    kind = getattr(model, "head_kind", None)
    library = "sentence-transformers" if kind in SENTENCE_TRANSFORMERS else "transformers"
    pipeline_tag = PIPELINE_TAGS.get(kind)
    tags = [LIBRARY, "bert", *([kind or "encoder"] if pipeline_tag is None else [pipeline_tag])]
    if kind == "embedder":
        tags.append("feature-extraction")
    data = ModelCardData(
        library_name=library,
        pipeline_tag=pipeline_tag,
        base_model=run["base_model"],
        tags=tags,
    )
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n{_body(model, kind, library, run, repo_id or str(folder))}")
    card.save(folder / README)
    return card


def read_run(run_folder):
    """What a run left in `run_folder` for the card: `base_model` (the Hub repo its
    `--init`, else its `--teacher`, resolved to), `start` (that checkpoint: the repo at
    its commit, or the path), `command`, `epochs` (eval_results.json's metrics of each
    epoch) and `best` (best_metrics.json); None or empty where the run did not record it."""
    run = {"base_model": None, "start": None, "command": None, "epochs": [], "best": None}
    if run_folder is None or not (Path(run_folder) / RUN_RECORD).is_file():
        return run
    folder = Path(run_folder)
    record = read_json_object(folder / RUN_RECORD)
    start = record.get("init") or record.get("teacher") or {}
    run["base_model"] = start.get("repo_id")
    run["start"] = f"{start['repo_id']}@{start['commit']}" if start.get("repo_id") else start.get("path")
    run["command"] = record.get("command")
    if (folder / "eval_results.json").is_file():
        evaluations = json.loads((folder / "eval_results.json").read_text(encoding="utf-8"))
        run["epochs"] = [entry for entry in evaluations if isinstance(entry, dict) and "epoch" in entry]
    if (folder / "best_metrics.json").is_file():
        run["best"] = read_json_object(folder / "best_metrics.json")
    return run


def _body(model, kind, library, run, name):
    config = model.config if hasattr(model, "config") else model.encoder.config
    lines = [
        f"# {name.rsplit('/', 1)[-1]}",
        "",
        f"A {type(model).__name__} (BERT L{config.num_hidden_layers}/H{config.hidden_size}/"
        f"A{config.num_attention_heads}, {model.count_params():,} parameters) written by bert-keras"
        + (f", trained from `{run['start']}`." if run["start"] else "."),
    ]
    labels = getattr(model, "labels", None)
    if labels:
        lines += ["", "## Labels", "", "| id | label |", "| --- | --- |"]
        lines += [f"| {index} | {label} |" for index, label in enumerate(labels)]
    if run["epochs"]:
        lines += ["", "## Dev metrics", ""] + _metrics_table(run["epochs"])
        if run["best"] and "epoch" in run["best"]:
            lines += ["", f"The weights are those of epoch {run['best']['epoch']}."]
    if run["command"]:
        lines += ["", "## Training command", "", "```bash", shlex.join(run["command"]), "```"]
    lines += ["", "## Use", "", "```python", *_usage(kind, library, name), "```", ""]
    return "\n".join(lines)


def _metrics_table(epochs):
    names = list(dict.fromkeys(name for epoch in epochs for name in epoch))
    rows = [f"| {' | '.join(names)} |", f"|{' --- |' * len(names)}"]
    for epoch in epochs:
        rows.append(f"| {' | '.join(_number(epoch.get(name, '')) for name in names)} |")
    return rows


def _number(value):
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _usage(kind, library, name):
    if library == "sentence-transformers":
        cls = "CrossEncoder" if kind == "reranker" else "SentenceTransformer"
        return [f"from sentence_transformers import {cls}", "", f'model = {cls}("{name}")']
    auto = {
        "text-classification": "AutoModelForSequenceClassification",
        "token-classification": "AutoModelForTokenClassification",
        "question-answering": "AutoModelForQuestionAnswering",
        "fill-mask": "AutoModelForMaskedLM",
    }.get(PIPELINE_TAGS.get(kind), "AutoModel" if kind is None else "AutoModelForMultipleChoice")
    return [f"from transformers import {auto}", "", f'model = {auto}.from_pretrained("{name}")']
