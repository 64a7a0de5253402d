"""Vocabulary learning: `bert-keras vocab` and its learner against tf.text's learner, as distinct words grow.

For 1, 4 and 7 Gutenberg books (../shared/data/pretraining/gutenberg) and a synthetic
table of a million distinct words (Zipf counts), in the same run, each measurement in its
own process (wall time and that process's peak RSS):

- `bert-keras vocab` on the books (count the words, learn, write vocab.txt), and with
  `--workers 2` (forked processes counting the books' parts);
- the learner alone (`build_vocabulary`) on the saved counts;
- tf.text's learner (`wordpiece_tokenizer_learner_lib.learn`) on the same counts with the
  parameters and lower-threshold loop `build_vocabulary` used before (the reference), killed
  after --reference-cap seconds; and whether its vocab.txt is the same.

    nice -n 10 python bench/bench_vocab.py [--size 8000] [--books 1 4 7] [--synthetic-words 1000000]

With --prune-words N [N ...]: `bert-keras vocab --max-distinct-words N` instead, on the seven
books and on a synthetic text of --synthetic-text-mb MB (words of the synthetic table drawn
with Zipf frequencies): time, peak RSS, the floor it reports and how many of the exact
vocabulary's tokens the pruned one lacks.

    nice -n 10 python bench/bench_vocab.py --prune-words 5000 10000 --synthetic-text-mb 100
"""

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.measure import Report, Stopwatch, add_json_argument, machine_line, run_command

SHARED = Path(__file__).resolve().parents[2] / "shared"
BOOKS = sorted((SHARED / "data" / "pretraining" / "gutenberg").glob("*.txt"))


def synthetic_counts(num_words, seed=0):
    """`num_words` distinct words of 1-3 syllables and an optional suffix, counts ~ 5e6 / rank^1.1."""
    rng = np.random.default_rng(seed)
    onsets = "- b c d f g h k l m n p r s t v w br ch cl dr gr pl sh st th tr qu".split()
    vowels = "a e i o u ai ea ee ou y".split()
    codas = "- - n r s t l m nd ng st ck rt".split()
    suffixes = "- - - s ed ing er ly ness tion able ment é".split()
    syllables = [(o + v + c).replace("-", "") for o in onsets for v in vowels for c in codas]
    suffixes = [s.replace("-", "") for s in suffixes]
    words = {}
    while len(words) < num_words:
        n = num_words - len(words)
        lengths, picks = rng.integers(1, 4, n), rng.integers(0, len(syllables), (n, 4))
        ends = rng.integers(0, len(suffixes), n)
        for k in range(n):
            words.setdefault("".join(syllables[j] for j in picks[k, : lengths[k]]) + suffixes[ends[k]], None)
    counts = np.maximum(1, 5e6 / np.arange(1, num_words + 1) ** 1.1).astype(np.int64)
    return dict(zip(list(words)[:num_words], counts.tolist()))


def synthetic_text(path, megabytes, num_words=1_000_000, seed=0):
    """`megabytes` of lines of 12 words drawn from `synthetic_counts(num_words)` with Zipf (1.1) frequencies."""
    words = np.array(list(synthetic_counts(num_words)), dtype=object)
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as file:
        while file.tell() < megabytes << 20:
            picks = np.minimum(rng.zipf(1.1, 12 * 100_000), num_words) - 1
            lines = words[picks].reshape(-1, 12)
            file.write("".join(" ".join(line) + "\n" for line in lines))


def prune_table(args, work, report):
    """`bert-keras vocab` exact and with --max-distinct-words on the seven books and a synthetic text."""
    path = work / "synthetic.txt"
    synthetic_text(path, args.synthetic_text_mb)
    corpora = [("7 books", BOOKS[:7]), (f"synthetic text, {args.synthetic_text_mb} MB", [path])]
    print(
        "| corpus | --max-distinct-words | time | peak RSS | floor | distinct words | tokens not in the exact vocab |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, files in corpora:
        exact = None
        for limit in [None, *args.prune_words]:
            out = work / f"prune_{len(files)}_{limit}.txt"
            command = [str(Path(sys.executable).parent / "bert-keras"), "vocab", "--corpus", *map(str, files)]
            command += ["--size", str(args.size), "--out", str(out)]
            command += ["--max-distinct-words", str(limit)] if limit else []
            seconds, rss, _, log = measure(command, 3600)
            floor = re.search(r"seen more than (\d+) times", log)
            distinct = re.search(r", (\d+) distinct, in", log)[1]
            tokens = out.read_text(encoding="utf-8").splitlines()
            exact = exact or set(tokens)
            missing = len(exact - set(tokens))
            report.add(f"{name}, --max-distinct-words {limit or 'exact'}", "s", [seconds], peak_mb=rss, missing=missing)
            print(
                f"| {name} | {limit or 'exact'} | {seconds:.1f} s | {rss:.0f} MiB | {floor[1] if floor else 0} "
                f"| {int(distinct):,} | {missing} of {len(exact)} |",
                flush=True,
            )


def learn(counts_path, size, out, reference):
    """Child process: one learner on saved counts, writing its vocab.txt."""
    from bert_keras.text.vocab import build_vocabulary, reserved_tokens, write_vocabulary

    counts = json.loads(Path(counts_path).read_text(encoding="utf-8"))
    with Stopwatch() as watch:
        if not reference:
            vocabulary = build_vocabulary(counts, size)
        else:  # build_vocabulary before this learner: tf.text's learner under the same lower-threshold loop
            from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib

            upper = max(counts.values()) + 1
            for floor in range(1, 101):
                vocabulary = wordpiece_tokenizer_learner_lib.learn(
                    list(counts.items()),
                    size,
                    reserved_tokens(),
                    lower_thresh=floor,
                    upper_thresh=max(upper, floor + 1),
                )
                if len(vocabulary) <= size:
                    break
    print(watch.seconds)  # the learning alone, without the imports (TensorFlow's start)
    write_vocabulary(vocabulary, out)


def measure(command, cap):
    """(seconds, peak RSS MiB, finished, stderr) of `command` in its own process, killed after
    `cap` seconds; the seconds it prints if it prints them, else its wall time."""
    result = run_command(command, timeout=cap)
    if result["returncode"] not in (0, -9):
        raise RuntimeError(f"{command} failed: {result['stderr'][-2000:]}")
    finished, printed = result["returncode"] == 0, result["stdout"].split()
    seconds = float(printed[-1]) if finished and printed else result["seconds"]
    return seconds, result["peak_mb"], finished, result["stderr"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=8000)
    parser.add_argument("--books", type=int, nargs="*", default=[1, 4, 7])
    parser.add_argument("--synthetic-words", type=int, default=1_000_000, help="0: none")
    parser.add_argument("--reference-cap", type=float, default=900, help="seconds before tf.text's learner is killed")
    parser.add_argument("--synthetic-reference-cap", type=float, default=120, help="the same on the synthetic table")
    parser.add_argument("--prune-words", type=int, nargs="*", help="the --max-distinct-words table instead")
    parser.add_argument("--synthetic-text-mb", type=int, default=100, help="size of its synthetic text")
    parser.add_argument("--learn", nargs=4, metavar=("COUNTS", "SIZE", "OUT", "REFERENCE"), help=argparse.SUPPRESS)
    add_json_argument(parser)
    args = parser.parse_args(argv)
    if args.learn:
        return learn(args.learn[0], int(args.learn[1]), args.learn[2], args.learn[3] == "1")

    report = Report("bench_vocab", vars(args))
    print(f"{machine_line(report.machine)}; vocab size {args.size}\n")
    if args.prune_words:
        prune_table(args, Path(tempfile.mkdtemp(prefix="bench_vocab_")), report)
    else:
        corpus_table(args, report)
    if args.json:
        report.write(args.json)


def corpus_table(args, report):
    work = Path(tempfile.mkdtemp(prefix="bench_vocab_"))
    corpora = [(f"{n} book{'s' * (n > 1)}", BOOKS[:n]) for n in args.books]
    if args.synthetic_words:
        corpora.append((f"synthetic {args.synthetic_words:,} words", None))
    rows = []
    for name, files in corpora:
        rows.append(corpus_row(args, work, str(len(rows)), name, files))
        print(f"{name}: done", file=sys.stderr, flush=True)
        for kind, result in zip(
            ("bert-keras vocab", "--workers 2", "learner alone", "tf.text's learner"), rows[-1][2:6]
        ):
            if result:
                report.add(f"{name}, {kind}", "s", [result[0]], peak_mb=result[1], finished=result[2])
    print_table(rows)


def corpus_row(args, work, tag, name, files):
    """(name, distinct words, then the command's, its 2 workers', the learner's and tf.text's
    learner's (seconds, MiB, finished), and whether they made the same vocabulary) of a corpus:
    `files`, or synthetic counts when None."""
    from bert_keras.text.vocab import count_words

    counts_path = work / f"{tag}.json"
    if files is None:
        counts = synthetic_counts(args.synthetic_words)
        command = None
    else:
        counts = count_words([str(f) for f in files])
        out = work / f"{tag}.cli.txt"
        command = [str(Path(sys.executable).parent / "bert-keras"), "vocab", "--corpus", *map(str, files)]
        command += ["--size", str(args.size), "--out", str(out)]
    counts_path.write_text(json.dumps(counts), encoding="utf-8")
    learner = [sys.executable, __file__, "--learn", str(counts_path), str(args.size)]
    cli = measure(command, 3600) if command else None
    workers = None
    if command:
        workers = measure(command[:-1] + [str(work / f"{tag}.workers.txt"), "--workers", "2"], 3600)
    fast = measure(learner + [str(work / f"{tag}.fast.txt"), "0"], 3600)
    cap = args.reference_cap if files else args.synthetic_reference_cap
    reference = measure(learner + [str(work / f"{tag}.ref.txt"), "1"], cap)
    same = (work / f"{tag}.fast.txt").read_text() == (work / f"{tag}.ref.txt").read_text() if reference[2] else None
    if cli:
        outputs = {(work / f"{tag}.{kind}.txt").read_text() for kind in ("cli", "workers", "fast")}
        same = same and len(outputs) == 1
    return name, len(counts), cli, workers, fast, reference, same


def print_table(rows):
    def cell(result):
        if result is None:
            return "-"
        return f"{result[0]:.1f} s, {result[1]:.0f} MiB" if result[2] else f"> {result[0]:.0f} s (killed)"

    print("Seconds: `bert-keras vocab`'s whole run; the learners' learning alone (their imports left out).")
    print(
        "| corpus | distinct words | `bert-keras vocab` | `--workers 2` | learner alone | tf.text's learner "
        "| learner speed-up | command / tf.text's learner | same vocab |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, words, cli, workers, fast, reference, same in rows:
        speedup = f"{'' if reference[2] else '> '}{reference[0] / fast[0]:.0f}x"
        ratio = f"1/{reference[0] / cli[0]:.1f}" if cli and reference[2] else "-"
        same = "yes" if same else ("not compared" if same is None else "NO")
        print(
            f"| {name} | {words:,} | {cell(cli)} | {cell(workers)} | {cell(fast)} | {cell(reference)} "
            f"| {speedup} | {ratio} | {same} |"
        )


if __name__ == "__main__":
    main()
