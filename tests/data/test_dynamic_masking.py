"""Dynamic masking in tf.data against the recipe (`instances`, itself checked
against a transcription of google-research/bert create_pretraining_data.py)."""

import random
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, require

from bert_keras import BertTokenizer
from bert_keras.compat import dataset_graph
from bert_keras.data import graph_documents
from bert_keras.data.documents import detect_text_format, read_documents, split_sentences, tokenize_documents
from bert_keras.data.dynamic_masking import dynamic_masking_dataset
from bert_keras.data.graph_documents import file_documents
from bert_keras.data.graph_instances import GraphInstanceMaker, _sample_without_replacement
from bert_keras.data.instances import InstanceMaker, truncate_seq_pair
from bert_keras.data.token_cache import cache_tokenized_files, read_token_file

SAMPLE = DATA / "pretraining" / "sample_text.txt"
GUTENBERG = DATA / "pretraining" / "gutenberg"
BOOKS = ("austen-persuasion.txt", "chesterton-brown.txt")


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(str(require(DATA / "vocab" / "vocab.txt")))


@pytest.fixture(scope="module")
def books():
    return [str(require(GUTENBERG / name)) for name in BOOKS]


def as_ragged(documents):
    """Tokenized documents (lists of lists of ids) -> ragged `[documents, (sentences), (tokens)]`."""
    sentences = [sentence for document in documents for sentence in document]
    return tf.RaggedTensor.from_row_lengths(
        tf.RaggedTensor.from_row_lengths(np.concatenate(sentences).astype("int32"), [len(s) for s in sentences]),
        [len(d) for d in documents],
    )


def first_sep(batch, i):
    return int(np.argmax(batch["input_type_ids"][i])) - 1


def take(dataset, batches):
    return list(dataset.take(batches).as_numpy_iterator())


def stacked(batches):
    return {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}


# ---------------------------------------------------------------- reading documents


def test_documents_equal_the_python_reader(tmp_path, books):
    """Both formats, format detection, headings, titles, CRLF, odd whitespace, invalid UTF-8."""
    tricky = tmp_path / "tricky.txt"
    tricky.write_bytes(
        b'[A Title 1900]\r\n\r\nCHAPTER I\r\n\r\nMr. Smith came at 4 A. M.  "Was it you?" said\r\nshe.'
        b"  Then he left!  It was e.g. over.\r\n\r\nII. Another Part\r\n\r\nBad \xff\xfe bytes here.  "
        b"And \xc3\xa9t\xc3\xa9.\xe2\x80\x9d\xc2\xa0Next one.\n \t\n\nIV\n\nThe end... Really?! Yes.\n"
    )
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"  One.\r\nTwo \xff.\n\n\n\x0cThree.\n\xe2\x80\xa8Four.\n\n")
    # Only the first 2000 lines decide the format: here prose, though most lines are sentences.
    long = tmp_path / "long.txt"
    long.write_text("wrapped prose line\r\n" * 1999 + "ends here.\r\n\r\n" + "A sentence.\r\n" * 3000, newline="")
    for path in [require(SAMPLE), *books, tricky, lines, long]:
        expected = read_documents(path)
        documents = file_documents(tf.io.read_file(str(path))).to_list()
        assert [[s.decode() for s in d] for d in documents] == expected, path
    assert detect_text_format(tricky.read_text(errors="ignore")) == "prose"
    forced = file_documents(tf.io.read_file(str(lines)), "prose").to_list()
    assert [[s.decode() for s in d] for d in forced] == read_documents(lines, "prose")


def test_sentence_splitting_equals_the_python_splitter():
    paragraphs = [
        'Mr. Knightley, a sensible man, came in at 4 A. M.  "Was it you?" said she.  Then he\nleft! It was over.',
        "Dr. No met St. John. (Then) they left.  'Quite so,' said Mrs. Weston.  No. 5 was there.",
        "It ended.\u201d \u201cAnd then?\u201d she asked.  Etc. Etc. Fig. 3 shows it.  I. E. Smith.",
        "What?! Really... Yes.  _Emma_ said so. [Note] follows.  x.y. Z is last",
        "",
        "   ",
        "One sentence only",
    ]
    ours = graph_documents.split_sentences(tf.constant(paragraphs)).to_list()
    assert [[s.decode() for s in row] for row in ours] == [split_sentences(p) for p in paragraphs]


# ---------------------------------------------------------------- instances against the recipe


@pytest.fixture(scope="module")
def gutenberg_batches(tokenizer, books):
    dataset = dynamic_masking_dataset(books, tokenizer, batch_size=256, seed=1)
    return stacked(take(dataset, 16)), tokenizer


@pytest.mark.slow
def test_masking_statistics(gutenberg_batches):
    batch, tokenizer = gutenberg_batches
    weights = batch["masked_lm_weights"] > 0
    predicted = weights.sum()
    lengths = batch["input_mask"].sum(1)
    assert predicted == sum(min(20, max(1, round(n * 0.15))) for n in lengths)  # fills num_to_predict
    assert abs(predicted / lengths.sum() - 0.15) < 0.01
    rows = np.repeat(np.arange(len(lengths)), weights.sum(1))
    shown = batch["input_word_ids"][rows, batch["masked_lm_positions"][weights]]
    labels = batch["masked_lm_ids"][weights]
    assert abs(np.mean(shown == tokenizer.mask_id) - 0.8) < 0.02
    assert abs(np.mean(shown == labels) - 0.1) < 0.02
    assert abs(np.mean((shown != labels) & (shown != tokenizer.mask_id)) - 0.1) < 0.02
    assert not np.isin(labels, [tokenizer.cls_id, tokenizer.sep_id, 0]).any()


@pytest.mark.slow
def test_layout(gutenberg_batches):
    batch, tokenizer = gutenberg_batches
    for i in range(len(batch["input_mask"])):
        n = batch["input_mask"][i].sum()
        assert batch["input_mask"][i].tolist() == [1] * n + [0] * (128 - n)
        ids, segments = batch["input_word_ids"][i], batch["input_type_ids"][i]
        positions = batch["masked_lm_positions"][i][batch["masked_lm_weights"][i] > 0]
        original = ids.copy()
        original[positions] = batch["masked_lm_ids"][i][: len(positions)]
        assert original[0] == tokenizer.cls_id and original[n - 1] == tokenizer.sep_id
        sep = first_sep(batch, i)
        assert original[sep] == tokenizer.sep_id and sep >= 2 and n - sep >= 3
        assert (segments[: sep + 1] == 0).all() and (segments[sep + 1 : n] == 1).all()
        assert (segments[n:] == 0).all() and (ids[n:] == 0).all()
        assert np.isin(original[1 : n - 1], [tokenizer.cls_id, tokenizer.sep_id]).sum() == 1
        assert (np.diff(positions) > 0).all() and 1 <= len(positions) <= 20 and positions.max() < n


@pytest.mark.parametrize("limit, slots", [(128, 20), (512, 80)])
def test_masked_positions_are_a_uniform_sample(limit, slots):
    """Floyd's sampler: `count` distinct numbers below `population`, each equally likely
    (chi-square against uniform, far below the 0.1% critical value), unused slots last."""
    rng = np.random.RandomState(0)
    population = rng.randint(1, limit + 1, 4000).astype("int32")
    count = np.minimum(population, rng.randint(0, slots + 1, 4000)).astype("int32")
    drawn = _sample_without_replacement(population, count, slots, limit, tf.constant([3, 4], tf.int64)).numpy()
    for row, (size, k) in enumerate(zip(population, count)):
        numbers = drawn[row, :k]
        assert len(set(numbers)) == k and (numbers >= 0).all() and (numbers < size).all()
        assert (drawn[row, k:] == slots + size).all()
    rows = 20000
    drawn = _sample_without_replacement(
        np.full(rows, 100, "int32"), np.full(rows, 10, "int32"), slots, limit, tf.constant([1, 2], tf.int64)
    ).numpy()[:, :10]
    frequency = np.bincount(drawn.ravel(), minlength=100)
    expected = rows * 10 / 100
    assert ((frequency - expected) ** 2 / expected).sum() < 148.2  # chi-square, 99 degrees of freedom, p = 0.001


def recipe_and_graph(tokenizer, books, seeds=4, **settings):
    """Instances of the recipe and of the graph version on the same documents, all in one group."""
    documents = tokenize_documents([d for f in books for d in read_documents(f)], tokenizer)
    recipe = InstanceMaker(tokenizer.vocabulary, **settings)
    expected = [i for s in range(seeds) for i in recipe.instances(documents, 1, random.Random(s))]
    maker = GraphInstanceMaker(recipe)
    make = tf.function(maker.instances)
    ragged = as_ragged(documents)
    ours = stacked(
        [{k: v.numpy() for k, v in make(ragged, tf.constant([s, 0], tf.int64)).items()} for s in range(seeds)]
    )
    return expected, ours


# Short targets are drawn per document, and a short document gives many more instances:
# with short_seq_prob 0.1 the recipe's own count varies by ~8% between seeds on these books.
@pytest.mark.slow
@pytest.mark.parametrize("short_seq_prob, tolerance", [(0.0, 0.03), (0.1, 0.1)])
def test_pairs_have_the_recipes_statistics(tokenizer, books, short_seq_prob, tolerance):
    """Instances per epoch, lengths and NotNext rate equal the recipe's (a coin at 50%, plus
    the single-sentence chunks that are always NotNext)."""
    expected, ours = recipe_and_graph(tokenizer, books, short_seq_prob=short_seq_prob)
    count = len(ours["input_mask"])
    assert abs(count / len(expected) - 1) < tolerance, (count, len(expected))
    lengths = ours["input_mask"].sum(1)
    assert abs(lengths.mean() / np.mean([len(i.input_ids) for i in expected]) - 1) < tolerance / 2
    a_lengths = (ours["input_type_ids"] == 0).sum(1) - (128 - lengths)
    assert abs(a_lengths.mean() / np.mean([i.segment_ids.count(0) for i in expected]) - 1) < tolerance
    random_next = ours["next_sentence_labels"].mean()
    expected_random_next = np.mean([i.is_random_next for i in expected])
    assert abs(random_next - expected_random_next) < 0.03, (random_next, expected_random_next)
    if short_seq_prob == 0:
        assert abs(random_next - 0.5) < 0.03
    predictions = (ours["masked_lm_weights"] > 0).sum(1)
    # num_to_predict follows the length (15%, at most 20), so it varies as much between seeds.
    assert abs(predictions.mean() / np.mean([len(i.masked_lm_positions) for i in expected]) - 1) < tolerance / 2


def test_truncation_keeps_the_recipes_lengths():
    """`truncate_seq_pair` cuts the same number of tokens from each side (which end is random)."""
    maker = GraphInstanceMaker(InstanceMaker(["[CLS]", "[SEP]", "[MASK]", "a"], max_seq_length=13))
    rng = random.Random(0)
    pairs = [(rng.randint(1, 20), rng.randint(0, 20)) for _ in range(400)]
    a_length, b_length = (tf.constant(x, tf.int32) for x in zip(*pairs))
    a_start, new_a, b_start, new_b = maker._truncate(
        tf.fill([400], 1000), a_length, tf.fill([400], 5000), b_length, tf.constant([0, 1], tf.int64)
    )
    for i, (la, lb) in enumerate(pairs):
        tokens_a, tokens_b = list(range(la)), list(range(lb))
        truncate_seq_pair(tokens_a, tokens_b, 10, rng)
        assert (new_a[i], new_b[i]) == (len(tokens_a), len(tokens_b))
        assert 1000 <= a_start[i] <= 1000 + la - len(tokens_a) and 5000 <= b_start[i] <= 5000 + lb - len(tokens_b)
    cut = (a_length - new_a).numpy()
    front = (a_start - 1000).numpy()
    assert abs(front.sum() / cut.sum() - 0.5) < 0.05  # a fair coin per token


def test_whole_word_masking_masks_whole_words_as_often_as_the_recipe(tokenizer, books):
    expected, ours = recipe_and_graph(tokenizer, books[:1], seeds=2, whole_word_mask=True)
    is_piece = np.array([token.startswith("##") for token in tokenizer.vocabulary])
    split_words = 0
    for i in range(len(ours["input_mask"])):
        weights = ours["masked_lm_weights"][i] > 0
        positions = ours["masked_lm_positions"][i][weights]
        original = ours["input_word_ids"][i].copy()
        original[positions] = ours["masked_lm_ids"][i][weights]
        masked = set(positions.tolist())
        # As in the recipe, a "##" piece belongs to the candidate before it, skipping [SEP]
        # (truncation can leave B starting with a piece); at the start of A it is a word.
        candidates = [p for p in range(1, ours["input_mask"][i].sum() - 1) if p != first_sep(ours, i)]
        for before, position in zip(candidates, candidates[1:]):
            if is_piece[original[position]]:
                assert (before in masked) == (position in masked)
                split_words += position in masked
    assert split_words > 100


def test_whole_word_masking_skips_words_that_do_not_fit_as_the_recipe():
    """Words of 1-6 pieces: the greedy choice often ends below num_to_predict (19 here),
    by as much as the recipe's."""
    vocabulary = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "w", "##x"]
    rng = random.Random(0)
    documents = [[[4] + [5] * rng.randint(0, 5) for _ in range(400)] for _ in range(20)]
    recipe = InstanceMaker(vocabulary, short_seq_prob=0.0, whole_word_mask=True)
    expected = [len(i.masked_lm_positions) for s in range(4) for i in recipe.instances(documents, 1, random.Random(s))]
    make = tf.function(GraphInstanceMaker(recipe).instances)
    ours = np.concatenate(
        [
            (make(as_ragged(documents), tf.constant([s, 0], tf.int64))["masked_lm_weights"].numpy() > 0).sum(1)
            for s in range(4)
        ]
    )
    assert np.mean(expected) < 18.5  # words did not fit
    assert abs(np.mean(ours) - np.mean(expected)) < 0.15, (np.mean(ours), np.mean(expected))


# ---------------------------------------------------------------- the pipeline


@pytest.mark.slow
def test_reproducible_resumable_and_new_every_epoch(tmp_path, tokenizer):
    def batches(seed=3, skip=0, parallel_calls=None, token_cache=None):
        dataset = dynamic_masking_dataset(
            [require(SAMPLE)],
            tokenizer,
            batch_size=4,
            seed=seed,
            skip_batches=skip,
            token_cache=token_cache,
            parallel_calls=parallel_calls,
        )
        return take(dataset, 20)

    first = batches()
    assert first[0]["input_word_ids"].shape == (4, 128) and first[0]["masked_lm_ids"].shape == (4, 20)
    for a, b in zip(first, batches(parallel_calls=3)):  # the same on any number of cores
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    for a, b in zip(first[5:], batches(skip=5)):  # a resumed run continues the same stream
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    for a, b in zip(first, batches(token_cache=tmp_path)):  # and the same from the token cache
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    other = batches(seed=4)
    assert any((a["input_word_ids"] != b["input_word_ids"]).any() for a, b in zip(first, other))
    # sample_text gives about 12 instances an epoch: 20 batches are 6 or 7 epochs, all different.
    masks = {tuple(map(tuple, b["masked_lm_positions"])) for b in first}
    assert len(masks) == len(first)
    labels = np.concatenate([b["next_sentence_labels"] for b in first])
    assert 0.35 < labels.mean() < 0.8  # the recipe gives 58% NotNext on sample_text


@pytest.mark.slow
def test_token_cache_holds_the_tokenized_documents_and_resumes(tmp_path, tokenizer, books):
    """A token file holds exactly what the graph reader makes of its text file, equal to
    the Python reader + tokenizer; finished files are kept, changed inputs or another
    tokenizer get new files, and a damaged file is an error naming it."""
    texts = [tmp_path / name for name in ("a.txt", "b.txt")]
    for text, book in zip(texts, books):
        text.write_bytes(open(book, "rb").read()[:200_000])
    files = [str(text) for text in texts]
    cache = tmp_path / "cache"
    paths = cache_tokenized_files(files, tokenizer, str(cache))
    assert [Path(path).parent for path in paths] == [cache, cache] and len(set(paths)) == 2
    for file, path in zip(files, paths):
        documents = read_token_file(path)
        expected = tokenize_documents(read_documents(file), tokenizer)
        assert documents.to_list() == expected
    # A run killed after the first file: the next run keeps it and makes only the second.
    first_written = Path(paths[0]).stat().st_mtime_ns
    Path(paths[1]).unlink()
    assert cache_tokenized_files(files, tokenizer, str(cache)) == paths
    assert Path(paths[0]).stat().st_mtime_ns == first_written and Path(paths[1]).exists()
    assert not list(cache.glob("*partial*"))
    # New keys for a changed input and for another tokenizer.
    texts[1].write_bytes(texts[1].read_bytes() + b"\nOne more line.\n")
    changed = cache_tokenized_files(files, tokenizer, str(cache))
    assert changed[0] == paths[0] and changed[1] != paths[1]
    cased = BertTokenizer(tokenizer.vocabulary, lower_case=False)
    assert set(cache_tokenized_files(files, cased, str(cache))).isdisjoint(changed)
    # A damaged token file is an error naming it, not a wrong stream.
    Path(changed[0]).write_bytes(Path(changed[0]).read_bytes()[:-8])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"(?s)not a whole bert-keras token file.*a\.txt"):
        read_token_file(changed[0])


def test_no_python_in_the_pipeline(tokenizer):
    """Every step is a graph op: nothing holds the GIL, so tf.data scales with cores."""

    def python_ops(dataset):
        graph = dataset_graph(dataset)
        nodes = list(graph.node) + [node for function in graph.library.function for node in function.node_def]
        return {node.op for node in nodes} & {"PyFunc", "EagerPyFunc", "PyFuncStateless", "GeneratorDataset"}

    dataset = dynamic_masking_dataset([require(SAMPLE)], tokenizer, batch_size=4)
    assert python_ops(dataset) == set()
    # The check sees a generator, and Python called from inside a map function.
    generator = tf.data.Dataset.from_generator(lambda: iter([1]), output_signature=tf.TensorSpec([], tf.int32))
    assert "GeneratorDataset" in python_ops(generator)
    numbers = tf.data.Dataset.range(3).map(lambda x: tf.py_function(lambda y: y + 1, [x], tf.int64))
    assert python_ops(numbers) == {"EagerPyFunc"}


@pytest.mark.slow
def test_workers_read_disjoint_files(tmp_path, tokenizer):
    """`pretrain --corpus` under MultiWorkerMirroredStrategy: each input pipeline reads its
    own files (every other one of 4), and together they read all."""
    from bert_keras.data.pretraining_inputs import PretrainingInputs

    words = ["apple", "river", "castle", "garden"]
    files = []
    for word in words:
        path = tmp_path / f"{word}.txt"
        path.write_text("".join(f"The {word} is here.\nA {word} again.\n\n" for _ in range(6)))
        files.append(str(path))
    inputs = PretrainingInputs(
        tokenizer, corpus=files, seq_length=32, max_predictions_per_seq=5, token_cache=str(tmp_path / "cache")
    )
    seen = []
    for index in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=index, num_replicas_in_sync=2)
        batches = take(inputs.batches(8, context), 8)
        ids = np.concatenate([np.concatenate([b["input_word_ids"], b["masked_lm_ids"]], 1) for b in batches])
        seen.append({word for word in words if (ids == tokenizer.token_to_id(word)).any()})
    assert seen == [{"apple", "castle"}, {"river", "garden"}]


@pytest.mark.slow
@pytest.mark.parametrize("cached", [False, True])
def test_bad_input(tmp_path, tokenizer, cached):
    """Empty files and invalid UTF-8 are read as the Python reader reads them (bytes that
    are not UTF-8 are dropped); a corpus with no text is an error, not an endless wait;
    the same through the token cache."""
    cache = str(tmp_path / "cache") if cached else None
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    garbage = tmp_path / "garbage.txt"
    garbage.write_bytes(b"\xff\xfe\x80\n\n\xc0\xc1\x01\n \t\n")  # no text once decoded and cleaned
    text = tmp_path / "text.txt"
    text.write_bytes(b"First \xff line.\nSecond line.\n\nOther \xc3( document.\nIts end.\n")
    files = [str(empty), str(garbage), str(text)]
    batches = take(dynamic_masking_dataset(files, tokenizer, 2, 32, 5, token_cache=cache), 3)
    assert all(b["input_mask"].sum() > 0 for b in batches)
    for bad in ([str(empty)], [str(empty), str(garbage)]):
        with pytest.raises(tf.errors.FailedPreconditionError, match="infinite"):
            take(dynamic_masking_dataset(bad, tokenizer, 2, 32, 5, token_cache=cache), 1)
    with pytest.raises(ValueError, match="document format"):
        dynamic_masking_dataset([str(text)], tokenizer, 2, format="markdown")
    with pytest.raises(FileNotFoundError, match="no input files match"):
        dynamic_masking_dataset([str(tmp_path / "none*.txt")], tokenizer, 2)
