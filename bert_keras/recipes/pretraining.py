"""The pre-training run: masked LM (+ next sentence) with `model.fit`, phase after phase.

Checkpoints are `StepBackup`s (weights, optimizer state, seeds, running metrics) taken
every `checkpoint_every` steps and on SIGTERM; one Keras "epoch" is one checkpoint
interval (the last one shorter when the interval does not divide the steps). The data
stream is deterministic, so a run killed at any moment and started again with the same
arguments skips the batches already trained on, read off the restored optimizer's
`iterations`, and loses at most one interval. Held-out data is evaluated at every
checkpoint, with the model's top words for a few held-out instances' masked words in
TensorBoard; a second phase (e.g. 128 -> 512 tokens) runs after the first, as in the paper.
"""

import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import keras
import tensorflow as tf

from bert_keras.data.pretraining_inputs import PretrainingInputs
from bert_keras.models.dtype import with_dtype
from bert_keras.models.saving import save_checkpoint
from bert_keras.text.tokenizer import BertTokenizer
from bert_keras.text.vocab import check_vocabulary
from bert_keras.training import distribute
from bert_keras.training.backup import fit_from_backup, prune_logs
from bert_keras.training.callbacks import StopAfterSteps, TensorBoard
from bert_keras.training.fill_mask_summaries import FillMaskSummaries
from bert_keras.training.optimization import create_optimizer
from bert_keras.training.progress import fit_progress

FILL_MASK_SAMPLES = 4  # held-out instances whose masked words each evaluation shows in TensorBoard


@dataclasses.dataclass(frozen=True)
class PretrainingPhase:
    """`steps` optimizer updates at `seq_length` tokens with up to
    `max_predictions_per_seq` masked, `batch_size` instances a step, the learning rate
    warmed up over `warmup_steps` then decayed linearly to 0 at `steps`. `data`:
    TFRecords at these lengths (none: the run's `corpus`)."""

    steps: int
    seq_length: int = 128
    max_predictions_per_seq: int = 20
    batch_size: int = 32
    learning_rate: float = 1e-4
    warmup_steps: int = 10000
    data: Sequence[str] = ()
    name: str = "phase1"

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"{self.name}: steps must be >= 1, got {self.steps}")


class PretrainingRun(NamedTuple):
    """The trained pretrainer and each phase's `keras.callbacks.History`, by phase name."""

    pretrainer: keras.Model
    history: dict


def pretrain(
    pretrainer,
    phases,
    *,
    vocab,
    output_dir,
    lower_case=True,
    corpus=(),
    eval_data=(),
    eval_corpus=(),
    eval_steps=100,
    checkpoint_every=1000,
    packing=0,
    packing_window=1024,
    whole_word_mask=False,
    token_cache=None,
    seed=0,
    optimizer="adamw",
    weight_decay=0.01,
    gradient_accumulation_steps=1,
    strategy=None,
    jit_compile="auto",
    verbose="auto",
):
    """Pre-trains `pretrainer` (a `BertPretrainer` built in `strategy`'s scope) through
    `phases` (`PretrainingPhase`s, run in order) on their TFRecords or on the text files
    `corpus`, masked anew every epoch. Writes to `output_dir`: `checkpoints/<phase>/`
    (the resume state), `logs/<phase>/` (TensorBoard), `packing_<phase>.json` with
    `packing` (rows of up to `packing` instances; `batch_size` then counts instances)
    and `final/` (the encoder as `.keras`, Hugging Face and TF1, and encoder + heads as
    TF1). `jit_compile` "auto" is Keras' choice: XLA on GPUs and TPUs, not on CPU, where the
    step measured slower with it on shared cores (docs/benchmarks.md).
    `eval_data` (TFRecords) or `eval_corpus` (text) is evaluated at every
    checkpoint, at most `eval_steps` batches. Called again with the same arguments, it
    resumes from the last checkpoint. Returns a `PretrainingRun`."""
    output_dir = Path(output_dir)
    strategy = strategy or tf.distribute.get_strategy()
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
    if bool(eval_data) and bool(eval_corpus):
        raise ValueError("held-out data is TFRecords (eval_data) or text (eval_corpus), not both")
    token_cache = token_cache or str(output_dir / "token_cache")
    tokenizer = BertTokenizer(str(vocab), lower_case=lower_case)
    options = dict(tokenizer=tokenizer, whole_word_mask=whole_word_mask, token_cache=token_cache)
    inputs = [
        PretrainingInputs(
            records=phase.data, corpus=() if phase.data else corpus, seed=seed, **lengths(phase), **options
        )
        for phase in phases
    ]
    for phase, phase_inputs in zip(phases, inputs):
        phase_inputs.check(distribute.input_pipelines(strategy), f"{phase.name}'s --data" if phase.data else "--corpus")
    check_model(pretrainer, tokenizer, vocab, phases)
    history = {}
    for phase, phase_inputs in zip(phases, inputs):
        held_out = None
        if eval_data or eval_corpus:
            held_out = PretrainingInputs(records=eval_data, corpus=eval_corpus, **lengths(phase), **options)
        history[phase.name] = run_phase(
            pretrainer,
            phase,
            phase_inputs,
            held_out,
            output_dir=output_dir,
            eval_steps=eval_steps,
            checkpoint_every=checkpoint_every,
            packing=packing,
            packing_window=packing_window,
            optimizer=optimizer,
            weight_decay=weight_decay,
            gradient_accumulation_steps=gradient_accumulation_steps,
            strategy=strategy,
            jit_compile=jit_compile,
            verbose=verbose,
        )
    save_final(pretrainer, output_dir / "final", vocab, strategy)
    return PretrainingRun(pretrainer, history)


def lengths(phase):
    return dict(seq_length=phase.seq_length, max_predictions_per_seq=phase.max_predictions_per_seq)


def check_model(pretrainer, tokenizer, vocab, phases):
    """The vocabulary fits the model (pre-training needs one row per token: masked-LM
    logits over the table) and every phase's length fits its position table."""
    config = pretrainer.config
    if config.vocab_size != tokenizer.vocabulary_size:
        raise ValueError(
            f"{vocab} has {tokenizer.vocabulary_size} tokens but the model's vocab_size is {config.vocab_size}"
            + (f" ({pretrainer.vocab_path})" if pretrainer.vocab_path else "")
        )
    if pretrainer.vocab_path is not None:  # the checkpoint's own vocabulary (a path, or tokens from .keras)
        own = pretrainer.vocab_path
        checkpoint = Path(own).parent if isinstance(own, (str, os.PathLike)) else "the pretrainer's"
        check_vocabulary(str(vocab), config.vocab_size, checkpoint, own)
    positions = config.max_position_embeddings
    for phase in phases:
        if phase.seq_length > positions:
            raise ValueError(f"{phase.name}: seq length {phase.seq_length} > max_position_embeddings {positions}")


def run_phase(
    pretrainer,
    phase,
    inputs,
    held_out,
    *,
    output_dir,
    eval_steps,
    checkpoint_every,
    packing,
    packing_window,
    optimizer,
    weight_decay,
    gradient_accumulation_steps,
    strategy,
    jit_compile,
    verbose,
):
    """One phase's `fit` (`pretrain`'s arguments), resumed from its backup in
    `output_dir/checkpoints/<phase>`. Returns its `History`."""
    accumulation = gradient_accumulation_steps
    interval = min(checkpoint_every, phase.steps)
    # Not `steps`: a run resumed with more steps goes on to them (its schedule stretched).
    settings = {key: value for key, value in dataclasses.asdict(phase).items() if key != "steps"}
    plan = dict(settings, checkpoint_every=checkpoint_every, accumulation=accumulation)
    files = {"data": list(inputs.records), "corpus": list(inputs.corpus)}
    options = dict(plan=plan, inputs={name: paths for name, paths in files.items() if paths})
    options.update(on_sigterm=distribute.input_pipelines(strategy) == 1, batches_per_step=accumulation)
    with (
        distribute.chief_path(output_dir / "logs" / phase.name, strategy) as logs,
        distribute.backup_and_restore(output_dir / "checkpoints" / phase.name, strategy, **options) as backup,
    ):
        with strategy.scope():
            pretrainer.compile(
                optimizer=create_optimizer(
                    phase.learning_rate,
                    phase.steps,
                    phase.warmup_steps,
                    optimizer=optimizer,
                    weight_decay=weight_decay,
                    gradient_accumulation_steps=accumulation,
                ),
                jit_compile=jit_compile,
            )
            done = backup.restore(pretrainer)  # optimizer variables are made in the scope
        if done:
            print(f"{phase.name}: resuming after step {min(done, phase.steps)} of {phase.steps}", file=sys.stderr)
        backup.finished = backup.finished and done >= phase.steps  # run again with more steps: goes on
        prune_logs(logs, done * accumulation, done // interval if done < phase.steps else -(-done // interval))
        rows = phase.batch_size
        if packing:
            rows = packing_rows(inputs, phase, output_dir, packing, packing_window, strategy)
        validation = {} if held_out is None else held_out_validation(held_out, phase.batch_size, eval_steps, strategy)
        fill_mask = fill_mask_summaries(held_out, phase, logs)
        verbose, progress = fit_progress(verbose)
        try:
            return fit_from_backup(
                pretrainer,
                backup,
                # The dataset functions run inside distribute_dataset, in this iteration.
                lambda skip: distribute.distribute_dataset(
                    strategy, lambda batch, context: inputs.batches(batch, context, skip, packing, packing_window), rows
                ),
                steps=phase.steps * accumulation,
                epochs=-(-phase.steps // interval),
                steps_per_epoch=interval * accumulation,
                callbacks=lambda: [
                    *progress,
                    TensorBoard(str(logs), update_freq=max(1, interval // 10)),
                    StopAfterSteps(phase.steps, interval),
                    *fill_mask,
                ],
                verbose=verbose,
                shuffle=False,  # the dataset is already shuffled, deterministically
                **validation,
            )
        except tf.errors.DataLossError as error:
            if not inputs.records:
                raise
            raise inputs.corrupt_record_error(error, phase.name) from None


def held_out_validation(held_out, batch_size, eval_steps, strategy):
    """`fit`'s `validation_data` and `validation_steps`: the same held-out batches at
    every checkpoint, at most `eval_steps` of them."""
    return dict(
        validation_data=distribute.distribute_dataset(
            strategy, lambda batch, context: held_out.held_out(batch, eval_steps, context), batch_size
        ),
        validation_steps=held_out.held_out_steps(batch_size, eval_steps),
    )


def fill_mask_summaries(held_out, phase, logs):
    """The callback that writes the model's answers for the masked words of the first few
    held-out instances (`FILL_MASK_SAMPLES`, at most a batch) to `logs` at every
    evaluation: `[FillMaskSummaries]`, or none without held-out data."""
    if held_out is None:
        return []
    count = min(FILL_MASK_SAMPLES, phase.batch_size)
    samples = next(iter(held_out.held_out(count, 1, tf.distribute.InputContext())))
    return [FillMaskSummaries(samples, held_out.tokenizer, logs)]


def packing_rows(inputs, phase, output_dir, packing, packing_window, strategy):
    """Rows a global step takes with `packing`: `batch_size` instances at the sequences
    per row of the data's first window; reported, and kept in `packing_<phase>.json`."""
    report = inputs.packing_report(phase.batch_size, packing, packing_window, strategy.num_replicas_in_sync)
    print(
        f"{phase.name}: packing up to {packing} instances a row: {report['sequences_per_row']:.2f} a row on "
        f"average, padding {report['padding']:.1%} (unpacked {report['padding_unpacked']:.1%}); --batch-size "
        f"{phase.batch_size} instances -> {report['rows_per_step']} rows a step",
        file=sys.stderr,
    )
    if distribute.is_chief(strategy):
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / f"packing_{phase.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    return report["rows_per_step"]


def save_final(pretrainer, final, vocab, strategy):
    """The encoder as `.keras`, Hugging Face and TF1 (in float32 after mixed precision),
    and encoder + heads as TF1, into `final` (on the chief)."""
    with distribute.chief_path(final, strategy) as folder:
        folder.mkdir(parents=True, exist_ok=True)
        encoder = pretrainer.encoder
        if encoder.dtype_policy.name != "float32":  # mixed precision: the weights are float32 already
            encoder = with_dtype(encoder, "float32")
        save_checkpoint(encoder, str(folder / "encoder.keras"), "keras")
        save_checkpoint(encoder, folder / "encoder_hf", "hf", vocab_path=str(vocab))
        save_checkpoint(encoder, folder / "encoder_tf1", "tf1", vocab_path=str(vocab))
        save_checkpoint(pretrainer, folder / "pretrainer_tf1", "tf1", vocab_path=str(vocab))
