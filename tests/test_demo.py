from pipelines.cli import main as cli


def test_demo_on_real_weights_finds_the_paraphrase(capsys, minilm_dir):
    assert cli(["demo"]) == 0
    out = capsys.readouterr().out
    assert "L6/H384/A12, 22,713,216 parameters" in out
    assert "sequence_output  (5, 16, 384)" in out
    assert "nearest to 'A man is eating food.': 'A man is eating a piece of bread.'" in out


def test_demo_random_encoder(capsys, minilm_dir):
    assert cli(["demo", "--init", "random"]) == 0
    assert "pooled_output    (5, 128)" in capsys.readouterr().out


def test_demo_bad_checkpoint_is_a_clear_error(capsys, tmp_path):
    assert cli(["demo", "--init", str(tmp_path / "nope")]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
