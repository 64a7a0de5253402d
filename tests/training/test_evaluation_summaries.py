"""The worst-errors table as TensorBoard's text dashboard renders it (its own sanitized
markdown renderer): hostile texts and label names come out as written, one row each,
with nothing read as markup. The summaries of real runs are read back in
tests/datasets/test_glue.py, test_conll.py and tests/pipelines/test_pretrain_pipeline.py."""

from harness import markdown_table
from tensorboard.plugin_util import markdown_to_safe_html

from bert_keras.training.evaluation_summaries import confusion_image, most_confident_errors, worst_errors_markdown

HOSTILE = [
    "a | b || c",
    "<script>alert(1)</script> <b>bold</b> &amp; &",
    "**not bold** _not italic_ `not code` [not](http://a.link) ![no](image.png)",
    "# not a heading\nline two\r\n\tand three \\| \\",
    "1. not a list - + > not a quote {braces} (parens) ! .",
]


def test_hostile_texts_and_labels_render_as_written():
    labels = ["<i>pos</i>", "neg|ative"]
    gold = [labels[0]] * len(HOSTILE)
    predicted = [labels[1]] * len(HOSTILE)
    confidence = [0.5 + index / 10 for index in range(len(HOSTILE))]
    rows = most_confident_errors(HOSTILE, gold, predicted, confidence)
    markdown = worst_errors_markdown(rows)
    html = markdown_to_safe_html(markdown)
    assert "<script" not in html and "<b>" not in html and "<i>" not in html and "<a " not in html
    header, *cells = markdown_table(markdown)
    assert header == ["text", "gold", "predicted", "confidence"]
    expected = [[" ".join(text.split()), labels[0], labels[1], f"{c:.4f}"] for text, c in zip(HOSTILE, confidence)]
    assert cells == expected[::-1]  # the surest first


def test_only_wrong_answers_count_and_at_most_ten():
    texts = [f"text {index}" for index in range(30)]
    gold = ["a"] * 30
    predicted = ["a" if index % 3 == 0 else "b" for index in range(30)]
    confidence = [index / 30 for index in range(30)]
    rows = most_confident_errors(texts, gold, predicted, confidence)
    assert [row["text"] for row in rows] == [f"text {index}" for index in range(29, 0, -1) if index % 3][:10]


def test_label_names_that_look_like_tex_are_drawn_as_text():
    """matplotlib reads `$...$` as TeX unless told not to: an unknown command would stop the run."""
    image = confusion_image([[3, 1], [0, 2]], ["$\\foo{$", "$x^$ <b>"])
    assert image.shape[0] == 1 and image.shape[-1] == 4 and image.dtype == "uint8"
