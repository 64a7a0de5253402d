"""`bert-keras pretrain`: masked LM + next sentence prediction with `model.fit`.

The run is `bert_keras.recipes.pretrain`; this command turns its flags into phases.

`--no-nsp` trains masked LM alone (the paper's "No NSP" ablation) on the same data.
`--eval-data` (TFRecords) or `--eval-corpus` (text, masked once with a fixed seed) is
held-out data evaluated at every checkpoint (masked-LM and next-sentence loss and
accuracy, as the original's `--do_eval`), logged beside the training curves.

Checkpoints are Keras `BackupAndRestore` backups (weights, optimizer state, step) taken
every `--checkpoint-every` steps; one Keras "epoch" is one checkpoint interval (the last
one shorter when the interval does not divide the steps), and the
data stream is deterministic, so a run killed at any moment and started again with the
same command skips the batches already trained on and loses at most one interval.
An optional second phase (e.g. 128 -> 512 tokens) runs after the first, as in the paper.
"""

import sys
from pathlib import Path

from bert_keras_cli.arguments import (
    CheckpointPath,
    InputPath,
    add_distribution_arguments,
    add_jit_compile_argument,
    add_recompute_argument,
)
from bert_keras_cli.setup import set_up_training


def register(subparsers):
    parser = subparsers.add_parser(
        "pretrain", help="pre-train BERT (masked LM + next sentence) with model.fit", description=__doc__
    )
    parser.add_argument(
        "--config", default="base", help="preset name (tiny..large; vocab_size from --vocab) or bert_config.json"
    )
    parser.add_argument(
        "--init", type=CheckpointPath, help="start from this checkpoint (TF1, HF BertForPreTraining, .keras)"
    )
    parser.add_argument("--vocab", required=True, type=InputPath, help="vocab.txt (its size must equal vocab_size)")
    parser.add_argument("--cased", action="store_true")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data", nargs="+", type=InputPath, help="TFRecords made by create-pretraining-data (or the original tool)"
    )
    source.add_argument(
        "--corpus", nargs="+", type=InputPath, help="text files: dynamic masking, new masks every epoch"
    )
    parser.add_argument("--output", required=True, help="output folder (checkpoints, logs, final encoder)")
    parser.add_argument(
        "--no-nsp",
        action="store_true",
        help="masked LM only: no next-sentence head or loss (same data; its NSP labels are ignored)",
    )
    held_out = parser.add_mutually_exclusive_group()
    held_out.add_argument(
        "--eval-data", nargs="+", type=InputPath, help="held-out TFRecords, evaluated at every checkpoint"
    )
    held_out.add_argument(
        "--eval-corpus", nargs="+", help="held-out text files, masked once (fixed seed), evaluated at every checkpoint"
    )
    parser.add_argument(
        "--eval-steps",
        type=int,
        default=100,
        help="at most this many held-out batches per evaluation (the original's max_eval_steps)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, required=True, help="optimizer updates in phase 1")
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--max-predictions-per-seq", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--warmup-steps", type=int, default=10000)
    parser.add_argument("--optimizer", choices=("adamw", "lamb"), default="adamw")
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    add_recompute_argument(parser)
    add_phase2_and_input_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    add_distribution_arguments(parser)
    add_jit_compile_argument(parser, "Keras' choice: on GPUs and TPUs, off on CPU, where it trained slower here")
    parser.set_defaults(func=run)


def add_phase2_and_input_arguments(parser):
    parser.add_argument("--phase2-steps", type=int, default=0, help="a second phase at --phase2-seq-length")
    parser.add_argument("--phase2-seq-length", type=int, default=512)
    parser.add_argument("--phase2-max-predictions-per-seq", type=int, default=80)
    parser.add_argument("--phase2-batch-size", type=int)
    parser.add_argument("--phase2-data", nargs="+", type=InputPath, help="TFRecords for phase 2 (with --data)")
    parser.add_argument("--phase2-learning-rate", type=float)
    parser.add_argument("--phase2-warmup-steps", type=int)
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=1000,
        help="steps between checkpoints (at most a phase's steps; the last interval may be shorter)",
    )
    parser.add_argument(
        "--packing",
        type=int,
        default=0,
        metavar="K",
        help="pack up to K instances into each row (no attention between them; the losses "
        "are the unpacked batch's); --batch-size then counts instances, on average",
    )
    parser.add_argument(
        "--packing-window",
        type=int,
        default=1024,
        help="instances packed together, in stream order (first-fit-decreasing)",
    )
    parser.add_argument("--whole-word-mask", action="store_true", help="with --corpus")
    parser.add_argument(
        "--token-cache",
        help="with --corpus: tokenize each text file once into this folder "
        "(about as much disk as the text; default OUTPUT/token_cache)",
    )


def phases(args):
    """The `PretrainingPhase`s the flags ask for, in order."""
    from bert_keras.recipes.pretraining import PretrainingPhase

    result = [
        PretrainingPhase(
            steps=args.steps,
            seq_length=args.seq_length,
            max_predictions_per_seq=args.max_predictions_per_seq,
            batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            warmup_steps=args.warmup_steps,
            data=args.data or (),
        )
    ]
    if args.phase2_steps:
        if args.data and not args.phase2_data:
            raise ValueError("--phase2-steps with --data needs --phase2-data (TFRecords at the phase-2 length)")
        result.append(
            PretrainingPhase(
                name="phase2",
                steps=args.phase2_steps,
                seq_length=args.phase2_seq_length,
                max_predictions_per_seq=args.phase2_max_predictions_per_seq,
                batch_size=args.phase2_batch_size or args.batch_size,
                learning_rate=args.phase2_learning_rate or args.learning_rate,
                warmup_steps=args.warmup_steps if args.phase2_warmup_steps is None else args.phase2_warmup_steps,
                data=args.phase2_data or (),
            )
        )
    return result


def run(args):
    from bert_keras.models.encoder import set_recompute
    from bert_keras.recipes.pretraining import pretrain
    from bert_keras.training import distribute

    plan = phases(args)
    strategy = set_up_training(args)
    with strategy.scope():
        pretrainer = build_pretrainer(args)
    set_recompute(pretrainer, args.recompute)
    pretrain(
        pretrainer,
        plan,
        vocab=args.vocab,
        lower_case=not args.cased,
        output_dir=args.output,
        corpus=args.corpus or (),
        eval_data=args.eval_data or (),
        eval_corpus=args.eval_corpus or (),
        eval_steps=args.eval_steps,
        checkpoint_every=args.checkpoint_every,
        packing=args.packing,
        packing_window=args.packing_window,
        whole_word_mask=args.whole_word_mask,
        token_cache=args.token_cache,
        seed=args.seed,
        optimizer=args.optimizer,
        weight_decay=args.weight_decay,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        strategy=strategy,
        jit_compile=args.jit_compile,
        verbose=1 if sys.stdout.isatty() else 2,
    )
    if distribute.is_chief(strategy):
        print(
            f"saved the encoder to {Path(args.output) / 'final'} (encoder.keras, encoder_hf/, encoder_tf1/) "
            "and encoder + heads to pretrainer_tf1/"
        )


def build_pretrainer(args):
    """A `BertPretrainer` from `--init`, a bert_config.json or a preset sized to `--vocab`."""
    from bert_keras import BertConfig, BertEncoder
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.text.tokenizer import load_vocabulary

    next_sentence = not args.no_nsp
    if args.init:
        return BertPretrainer.from_checkpoint(args.init, new_heads=True, next_sentence=next_sentence)
    if Path(args.config).suffix == ".json":
        config = BertConfig.from_json_file(args.config)
    else:
        config = BertConfig.preset(args.config, vocab_size=len(load_vocabulary(args.vocab)))
    return BertPretrainer(BertEncoder(config), next_sentence=next_sentence)
