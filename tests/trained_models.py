"""Tiny models fine-tuned by `bert-keras finetune TASK` (in this process, on tiny data), built
once a test session and shared by its xdist workers.

Fine-tuning even a 2-layer model costs tens of CPU-seconds, nearly all TensorFlow tracing; a
module whose test takes a fine-tuned model as its input (to export, serve, plot) asks the
`finetuned` fixture (tests/conftest.py) for one instead of training its own. Runs are kept in the session's
temporary folder, shared by the workers and guarded by a file lock, keyed by the task and
flags. They are read-only: a test that changes a run's files works on `copy_of` it.
"""

import hashlib
import json
import shutil
from pathlib import Path

import keras
from filelock import FileLock
from harness import ONE_LAYER_TINY, VOCAB

from bert_keras import BertEncoder
from bert_keras_cli.cli import main as cli

TEXTS = ["the film is good", "the film is bad", "a quick brown fox jumps", "the lazy dog", "it was good !", "bad"]
GOOD = [True, False, True, False, True, False]
# CoNLL-2003 lines (token POS chunk NER, IOB1) of the tiny vocabulary's words.
CONLL = (
    "-DOCSTART- -X- -X- O\n\njohn NNP B-NP I-PER\nlives VBZ B-VP O\nin IN B-PP O\nparis NNP B-NP I-LOC\n. . O O\n\n"
    "the DT B-NP O\ndog NN I-NP O\nwas VBD B-VP O\nin IN B-PP O\nparis NNP B-NP I-LOC\n\n"
)
SQUAD = {
    "version": "1.1",
    "data": [
        {
            "title": "t",
            "paragraphs": [
                {
                    "context": "john lives in paris.",
                    "qas": [
                        {
                            "id": "1",
                            "question": "where did john go?",
                            "answers": [{"text": "paris", "answer_start": 14}],
                        },
                        {
                            "id": "2",
                            "question": "who lives in paris?",
                            "answers": [{"text": "john", "answer_start": 0}],
                        },
                    ],
                }
            ],
        }
    ],
}
# What every run is given unless a test's flags say otherwise: one step of two examples.
DEFAULT_FLAGS = {"batch_size": 2, "max_train_steps": 1, "max_seq_length": 32, "verbose": 0}


def write_data(base):
    """Training files of each command and a tiny encoder on its own vocabulary."""
    (base / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    keras.utils.set_random_seed(0)
    # One layer: the runs are the inputs of tests of what comes after training.
    BertEncoder(ONE_LAYER_TINY).save(base / "encoder.keras")
    (base / "SST-2").mkdir()
    for name in ("train.tsv", "dev.tsv"):
        rows = "".join(f"{text}\t{int(good)}\n" for text, good in zip(TEXTS, GOOD))
        (base / "SST-2" / name).write_text("sentence\tlabel\n" + rows, encoding="utf-8")
    pairs = "".join(f"{text}\t{text[::-1]}\t{'same' if good else 'other'}\n" for text, good in zip(TEXTS, GOOD))
    (base / "pairs.tsv").write_text("text\ttext_b\tlabel\n" + pairs, encoding="utf-8")
    (base / "conll").mkdir()
    for name in ("eng.train", "eng.testa"):
        (base / "conll" / name).write_text(CONLL, encoding="utf-8")
    (base / "squad.json").write_text(json.dumps(SQUAD), encoding="utf-8")
    anchors = (
        "anchor\tpositive\nwho is john\tjohn lives in paris\nthe lazy dog\tthe dog was lazy\ngood film\tit was good\n"
    )
    (base / "anchors.tsv").write_text(anchors, encoding="utf-8")
    labelled = "query\tdocument\tlabel\nwho is john\tjohn lives in paris\t1\nwho is john\tthe lazy dog\t0\n"
    (base / "labelled.tsv").write_text(labelled + "good film\tit was good\t1\ngood film\tthe lazy dog\t0\n")


def task_arguments(base, task):
    return {
        "glue": ["glue", "--task", "sst-2", "--data-dir", str(base / "SST-2")],
        "tsv": ["tsv", "--train", str(base / "pairs.tsv"), "--dev", str(base / "pairs.tsv")],
        "conll": ["conll", "--data-dir", str(base / "conll")],
        "squad": ["squad", "--train-file", str(base / "squad.json"), "--predict-file", str(base / "squad.json")],
        "embedder": ["embedder", "--train", str(base / "anchors.tsv"), "--dev", str(base / "anchors.tsv")],
        "reranker": ["reranker", "--train", str(base / "labelled.tsv"), "--dev", str(base / "labelled.tsv")],
    }[task]


def flag_arguments(flags):
    """`batch_size=2, jit_compile=True` as `--batch-size 2 --jit-compile`."""
    arguments = []
    for name, value in flags.items():
        arguments.append("--" + name.replace("_", "-"))
        if value is not True:
            arguments.append(str(value))
    return arguments


class TrainedModels:
    """`finetuned(task, **flags)`: the run folder of `bert-keras finetune TASK` with the
    default flags updated by `flags`, trained by the first worker that asks for it."""

    def __init__(self, folder):
        self.folder = folder
        self.data = folder / "data"
        with FileLock(folder / "data.lock"):
            if not (folder / "data.done").exists():
                shutil.rmtree(self.data, ignore_errors=True)
                self.data.mkdir()
                write_data(self.data)
                (folder / "data.done").touch()

    def command(self, task, output_dir, **flags):
        """The command line of the run, writing to `output_dir` (to run it again)."""
        common = ["--init", str(self.data / "encoder.keras"), "--vocab", str(self.data / "vocab.txt")]
        common += flag_arguments({**DEFAULT_FLAGS, **flags}) + ["--output-dir", str(output_dir)]
        return ["finetune", *task_arguments(self.data, task), *common]

    def __call__(self, task, **flags):
        key = json.dumps([task, sorted(flags.items())])
        out = self.folder / f"run-{task}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
        done = Path(f"{out}.done")  # beside the run, whose files tests check
        with FileLock(f"{out}.lock"):
            if not done.exists():
                shutil.rmtree(out, ignore_errors=True)  # a run that failed part-way
                assert cli(self.command(task, out, **flags)) == 0, key
                done.touch()
        return out

    def artefact(self, name, build):
        """The folder `name`, filled by `build(folder)` by the first worker that asks for it:
        a file several modules make alike (a `.keras` file, an export), made once."""
        out = self.folder / name
        done = Path(f"{out}.done")
        with FileLock(f"{out}.lock"):
            if not done.exists():
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                build(out)
                done.touch()
        return out


def copy_of(run, tmp_path):
    """A copy of a shared run folder, for a test that changes its files."""
    return shutil.copytree(run, tmp_path / run.name)
