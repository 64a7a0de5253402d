"""`bert-keras pretrain`: masked LM + next sentence prediction with `model.fit`.

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

import json
import sys
from pathlib import Path

from pipelines.arguments import add_distribution_arguments

EVAL_SEED = 12345  # --eval-corpus: one fixed masking, the same at every evaluation


def register(subparsers):
    parser = subparsers.add_parser(
        "pretrain", help="pre-train BERT (masked LM + next sentence) with model.fit", description=__doc__
    )
    parser.add_argument(
        "--config", default="base", help="preset name (tiny..large; vocab_size from --vocab) or bert_config.json"
    )
    parser.add_argument("--init", help="start from this checkpoint (TF1, HF BertForPreTraining, .keras)")
    parser.add_argument("--vocab", required=True, help="vocab.txt (its size must equal vocab_size)")
    parser.add_argument("--cased", action="store_true")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", nargs="+", help="TFRecords made by create-pretraining-data (or the original tool)")
    source.add_argument("--corpus", nargs="+", help="text files: dynamic masking, new masks every epoch")
    parser.add_argument("--output", required=True, help="output folder (checkpoints, logs, final encoder)")
    parser.add_argument(
        "--no-nsp",
        action="store_true",
        help="masked LM only: no next-sentence head or loss (same data; its NSP labels are ignored)",
    )
    held_out = parser.add_mutually_exclusive_group()
    held_out.add_argument("--eval-data", nargs="+", help="held-out TFRecords, evaluated at every checkpoint")
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
    parser.add_argument("--phase2-steps", type=int, default=0, help="a second phase at --phase2-seq-length")
    parser.add_argument("--phase2-seq-length", type=int, default=512)
    parser.add_argument("--phase2-max-predictions-per-seq", type=int, default=80)
    parser.add_argument("--phase2-batch-size", type=int)
    parser.add_argument("--phase2-data", nargs="+", help="TFRecords for phase 2 (with --data)")
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
    parser.add_argument("--seed", type=int, default=0)
    add_distribution_arguments(parser)
    parser.add_argument("--jit-compile", action="store_true", help="compile the train step with XLA")
    parser.set_defaults(func=run)


def phases(args):
    """[(name, seq_length, max_predictions, batch, steps, lr, warmup, data)] to run in order."""
    result = [
        (
            "phase1",
            args.seq_length,
            args.max_predictions_per_seq,
            args.batch_size,
            args.steps,
            args.learning_rate,
            args.warmup_steps,
            args.data,
        ),
    ]
    if args.phase2_steps:
        if args.data and not args.phase2_data:
            raise ValueError("--phase2-steps with --data needs --phase2-data (TFRecords at the phase-2 length)")
        result.append(
            (
                "phase2",
                args.phase2_seq_length,
                args.phase2_max_predictions_per_seq,
                args.phase2_batch_size or args.batch_size,
                args.phase2_steps,
                args.phase2_learning_rate or args.learning_rate,
                args.phase2_warmup_steps if args.phase2_warmup_steps is not None else args.warmup_steps,
                args.phase2_data,
            ),
        )
    if args.checkpoint_every < 1:
        raise ValueError(f"--checkpoint-every must be >= 1, got {args.checkpoint_every}")
    for name, _, _, _, steps, *_ in result:
        if steps < 1:
            raise ValueError(f"{name}: steps must be >= 1, got {steps}")
    return result


def run(args):
    import keras
    import tensorflow as tf

    from bert_keras import BertConfig, BertEncoder, BertTokenizer
    from bert_keras.data.tfrecords import (
        expand_files,
        find_corrupt_tfrecord,
        tf_error_text,
    )
    from bert_keras.models.dtype import with_dtype
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.models.saving import save_checkpoint
    from bert_keras.text.vocab import check_vocabulary
    from bert_keras.training import distribute
    from bert_keras.training.finetuning import StopAfterSteps, TensorBoard
    from bert_keras.training.optimization import create_optimizer

    output = Path(args.output)
    plan = phases(args)
    strategy = distribute.resolve_strategy(args.strategy, tpu=args.tpu, devices=args.devices)
    for name, seq_length, max_predictions, *_, files in plan:
        check_data(args, name, files, seq_length, max_predictions, distribute.input_pipelines(strategy))
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy(distribute.mixed_precision_policy())
    keras.utils.set_random_seed(args.seed)
    tokenizer = BertTokenizer(args.vocab, lower_case=not args.cased)

    with strategy.scope():
        next_sentence = not args.no_nsp
        if args.init:
            pretrainer = BertPretrainer.from_checkpoint(args.init, new_heads=True, next_sentence=next_sentence)
        elif Path(args.config).suffix == ".json":
            pretrainer = BertPretrainer(
                BertEncoder(BertConfig.from_json_file(args.config)), next_sentence=next_sentence
            )
        else:
            pretrainer = BertPretrainer(
                BertEncoder(BertConfig.preset(args.config, vocab_size=tokenizer.vocabulary_size)),
                next_sentence=next_sentence,
            )
    config = pretrainer.config
    # Pre-training needs one row per token (masked-LM logits over the table): no padding.
    if config.vocab_size != tokenizer.vocabulary_size:
        raise ValueError(
            f"{args.vocab} has {tokenizer.vocabulary_size} tokens but the model's vocab_size is {config.vocab_size}"
            + (f" ({args.init})" if args.init else f" (--config {args.config})")
        )
    if args.init:
        check_vocabulary(args.vocab, config.vocab_size, args.init, pretrainer.vocab_path)

    for name, seq_length, max_predictions, batch_size, steps, lr, warmup, files in plan:
        if seq_length > config.max_position_embeddings:
            raise ValueError(
                f"{name}: seq length {seq_length} > max_position_embeddings {config.max_position_embeddings}"
            )
        backup = output / "checkpoints" / name
        # One epoch per checkpoint; the last is cut short when the interval does not divide the steps.
        interval = min(args.checkpoint_every, steps)
        epochs = -(-steps // interval)
        done = _completed_epochs(backup)
        # A finished phase still goes through fit, which restores its final weights.
        skip = done * interval * args.gradient_accumulation_steps if done < epochs else 0
        if done:
            print(f"{name}: resuming after step {min(done * interval, steps)} of {steps}", file=sys.stderr)
        rows = batch_size
        if args.packing:
            rows = packed_rows(args, tokenizer, files, batch_size, seq_length, max_predictions, strategy, name)
        # The dataset functions run inside distribute_dataset, in this iteration.
        dataset = distribute.distribute_dataset(
            strategy,
            lambda replica_batch, context: training_data(
                args,
                tokenizer,
                files,
                replica_batch,
                seq_length,
                max_predictions,
                skip,
                context,
            ),
            rows,
        )
        held_out = held_out_steps = None
        if args.eval_data or args.eval_corpus:
            held_out_steps = held_out_batches(args, batch_size)
            held_out = distribute.distribute_dataset(
                strategy,
                lambda replica_batch, context: held_out_data(
                    args,
                    tokenizer,
                    replica_batch,
                    seq_length,
                    max_predictions,
                    context,
                ),
                batch_size,
            )
        with strategy.scope():
            pretrainer.compile(
                optimizer=create_optimizer(
                    lr,
                    steps,
                    warmup,
                    optimizer=args.optimizer,
                    weight_decay=args.weight_decay,
                    gradient_accumulation_steps=args.gradient_accumulation_steps,
                ),
                jit_compile=args.jit_compile,
            )
        with (
            distribute.chief_path(output / "logs" / name, strategy) as logs,
            distribute.backup_and_restore(
                backup, strategy, double_checkpoint=True, delete_checkpoint=False
            ) as backup_callback,
        ):
            callbacks = [
                backup_callback,
                TensorBoard(str(logs), update_freq=max(1, interval // 10)),
                StopAfterSteps(steps * args.gradient_accumulation_steps, interval * args.gradient_accumulation_steps),
            ]
            try:
                pretrainer.fit(
                    dataset,
                    epochs=epochs,
                    steps_per_epoch=interval * args.gradient_accumulation_steps,
                    callbacks=callbacks,
                    verbose=1 if sys.stdout.isatty() else 2,
                    shuffle=False,  # the dataset is already shuffled, deterministically
                    validation_data=held_out,
                    validation_steps=held_out_steps,
                )
            except tf.errors.DataLossError as error:
                if not files:
                    raise
                # TensorFlow's message names no file: find the broken one (this raises its error).
                find_corrupt_tfrecord(expand_files(files))
                raise ValueError(
                    f"{name}: a TFRecord of {' '.join(files)} is corrupt: {tf_error_text(error)}"
                ) from None

    with distribute.chief_path(output / "final", strategy) as final:
        final.mkdir(parents=True, exist_ok=True)
        encoder = pretrainer.encoder
        if args.mixed_precision:  # weights are float32 already; this also makes it compute in float32
            encoder = with_dtype(encoder, "float32")
        save_checkpoint(encoder, str(final / "encoder.keras"), "keras")
        save_checkpoint(encoder, final / "encoder_hf", "hf", vocab_path=args.vocab)
        save_checkpoint(encoder, final / "encoder_tf1", "tf1", vocab_path=args.vocab)
        save_checkpoint(pretrainer, final / "pretrainer_tf1", "tf1", vocab_path=args.vocab)
    if distribute.is_chief(strategy):
        print(
            f"saved the encoder to {final} (encoder.keras, encoder_hf/, encoder_tf1/) "
            "and encoder + heads to pretrainer_tf1/"
        )


def check_data(args, phase, files, seq_length, max_predictions, workers):
    """Before training: the first records of every TFRecord (`files`) read and parsed, or
    the `--corpus` files' sizes, and every worker's share non-empty."""
    import tensorflow as tf

    from bert_keras.data.tfrecords import (
        check_tfrecords,
        expand_files,
    )
    from bert_keras.training import distribute

    if files:
        files = expand_files(files)
        counts = dict(zip(files, check_tfrecords(files, seq_length, max_predictions)))
        distribute.check_shares(files, workers, lambda path: not counts[path], f"{phase}'s --data")
    else:
        corpus = expand_files(args.corpus)
        distribute.check_shares(corpus, workers, lambda path: not tf.io.gfile.stat(path).length, "--corpus")


def packed_rows(args, tokenizer, files, batch_size, seq_length, max_predictions, strategy, phase):
    """Rows a global step of `--packing` (a multiple of the replicas): `batch_size`
    instances at the sequences per row of the data's first window; reported, and kept in
    OUTPUT/packing_PHASE.json."""
    import tensorflow as tf

    from bert_keras.data.packing import packing_statistics
    from bert_keras.training import distribute

    probe = instance_batches(args, tokenizer, files, 64, seq_length, max_predictions, 0, tf.distribute.InputContext())
    stats = packing_statistics(probe, seq_length, args.packing, args.packing_window)
    replicas = strategy.num_replicas_in_sync
    rows = replicas * max(1, round(batch_size / stats["sequences_per_row"] / replicas))
    stats.update({"max_sequences": args.packing, "rows_per_step": rows, "instances_per_step": batch_size})
    print(
        f"{phase}: packing up to {args.packing} instances a row: {stats['sequences_per_row']:.2f} a row on average, "
        f"padding {stats['padding']:.1%} (unpacked {stats['padding_unpacked']:.1%}); --batch-size {batch_size} "
        f"instances -> {rows} rows a step",
        file=sys.stderr,
    )
    if distribute.is_chief(strategy):
        Path(args.output).mkdir(parents=True, exist_ok=True)
        (Path(args.output) / f"packing_{phase}.json").write_text(json.dumps(stats, indent=2) + "\n")
    return rows


def training_data(args, tokenizer, files, batch_size, seq_length, max_predictions, skip_steps, context):
    """One input pipeline's batches of `batch_size` (per replica; rows with `--packing`):
    its share of the TFRecords (`files`) or of the `--corpus` text files, after the
    `skip_steps` global steps already trained."""
    from bert_keras.data.packing import pack_dataset
    from bert_keras.training import distribute

    skip = skip_steps * distribute.local_replicas(context)
    if not args.packing:
        return instance_batches(args, tokenizer, files, batch_size, seq_length, max_predictions, skip, context)
    instances = instance_batches(args, tokenizer, files, 64, seq_length, max_predictions, 0, context)
    return pack_dataset(instances, seq_length, args.packing, batch_size, args.packing_window).skip(skip)


def instance_batches(args, tokenizer, files, batch_size, seq_length, max_predictions, skip, context):
    """Batches of unpacked instances from this input pipeline's share of the data, the
    first `skip` left out."""
    from bert_keras.data.dynamic_masking import dynamic_masking_dataset
    from bert_keras.data.tfrecords import (
        expand_files,
        pretraining_dataset,
    )
    from bert_keras.training import distribute

    if files:
        files = distribute.shard_files(expand_files(files), context)
        return pretraining_dataset(files, batch_size, seq_length, max_predictions, seed=args.seed, skip_batches=skip)
    corpus = distribute.shard_files(expand_files(args.corpus), context)
    return dynamic_masking_dataset(
        corpus,
        tokenizer,
        batch_size,
        seq_length,
        max_predictions,
        whole_word_mask=args.whole_word_mask,
        seed=args.seed,
        skip_batches=skip,
        token_cache=args.token_cache or str(Path(args.output) / "token_cache"),
        progress=True,
    )


def held_out_batches(args, batch_size):
    """Global batches per evaluation: `--eval-steps`, or fewer when `--eval-data` holds fewer."""
    if not args.eval_data:
        return args.eval_steps  # --eval-corpus: an endless stream, masked once
    import tensorflow as tf

    from bert_keras.data.tfrecords import (
        expand_files,
    )

    files = expand_files(args.eval_data)
    records = sum(1 for _ in tf.data.TFRecordDataset(files))
    if records < batch_size:
        raise ValueError(f"--eval-data {' '.join(files)}: {records} records, fewer than one batch of {batch_size}")
    return min(args.eval_steps, records // batch_size)


def held_out_data(args, tokenizer, batch_size, seq_length, max_predictions, context):
    """This input pipeline's share of the held-out batches: the same records, masks and
    order at every evaluation (`--eval-corpus` is masked once, with a fixed seed)."""
    from bert_keras.data.dynamic_masking import dynamic_masking_dataset
    from bert_keras.data.tfrecords import (
        expand_files,
        pretraining_dataset,
    )
    from bert_keras.training import distribute

    if args.eval_data:
        records = expand_files(args.eval_data)
        dataset = pretraining_dataset(records, batch_size, seq_length, max_predictions, shuffle_buffer=0, repeat=False)
    else:
        dataset = dynamic_masking_dataset(
            expand_files(args.eval_corpus),
            tokenizer,
            batch_size,
            seq_length,
            max_predictions,
            whole_word_mask=args.whole_word_mask,
            seed=EVAL_SEED,
            token_cache=args.token_cache or str(Path(args.output) / "token_cache"),
        )
    dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
    return dataset.take(args.eval_steps * distribute.local_replicas(context)).cache()


def _completed_epochs(backup):
    """Checkpoint intervals finished, from BackupAndRestore's training_metadata.json."""
    metadata = Path(backup) / "training_metadata.json"
    if not metadata.exists():
        return 0
    return int(json.loads(metadata.read_text())["epoch"])
