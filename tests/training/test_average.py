import pytest
import torch

from aiayn.models.transformer import Transformer
from aiayn.training.average import DifferentModels, average_checkpoints, average_state, check_same_vocabulary

from training_helpers import VOCAB, tiny_config


def _saved(tmp_path, seeds, **cfg):
    paths = []
    for s in seeds:
        torch.manual_seed(s)
        paths.append(Transformer(tiny_config(**cfg)).save_pretrained(tmp_path / f"m{s}"))
    return paths


def _assert_mean_of(avg, paths):
    models = [Transformer.from_pretrained(p) for p in paths]
    for name, p in avg.named_parameters():
        manual = sum(dict(m.named_parameters())[name] for m in models) / len(models)
        torch.testing.assert_close(p, manual, rtol=0, atol=1e-7, msg=name)


def test_average_equals_manual_mean(tmp_path):
    paths = _saved(tmp_path, [1, 2, 3])
    avg = average_checkpoints(paths)
    _assert_mean_of(avg, paths)
    # tied matrices stay tied
    assert avg.encoder.embed.weight is avg.decoder.embed.weight


def test_averaging_and_loading_leave_the_callers_random_state(tmp_path):
    paths = _saved(tmp_path, [1, 2])
    torch.manual_seed(7)
    before = torch.get_rng_state()
    average_checkpoints(paths)
    assert torch.equal(torch.get_rng_state(), before)


def test_average_of_one_is_identity(tmp_path):
    (path,) = _saved(tmp_path, [4])
    state = average_state([path])
    ref = Transformer.from_pretrained(path).state_dict()
    from safetensors.torch import load_file

    assert state.keys() == load_file(f"{path}/model.safetensors").keys()  # every stored tensor (tied ones once)
    assert all(torch.equal(v, ref[k]) for k, v in state.items())


def test_mismatched_configs_are_an_error(tmp_path):
    a = _saved(tmp_path, [1])
    b = _saved(tmp_path / "x", [2], d_ff=32)
    with pytest.raises(ValueError, match="different model configs"):
        average_checkpoints(a + b)
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        average_state([tmp_path / "nothing"])


@pytest.mark.parametrize("odd_first", [False, True])
def test_weights_of_another_shape_than_their_config_says_are_one_line_naming_the_file(tmp_path, odd_first):
    """A checkpoint's config.json with another model's model.safetensors: the configs agree, so averaging
    failed in torch's addition ("The size of tensor a (64) must match ...", no file), or, listed first,
    in torch's load_state_dict, a page long."""
    import shutil

    a, b = _saved(tmp_path, [1, 2])
    (c,) = _saved(tmp_path / "x", [3], d_ff=32)
    shutil.copy(c / "model.safetensors", b / "model.safetensors")
    paths = [b, a] if odd_first else [a, b]
    with pytest.raises(ValueError) as e:
        average_checkpoints(paths)
    assert str(paths[1 - odd_first] / "model.safetensors") in str(e.value) and "\n" not in str(e.value)
    assert "shape" in str(e.value)


def test_configs_differing_only_in_dropout_average(tmp_path):
    """A dropout changes training, not the function the weights compute: such checkpoints average,
    and the model keeps the first one's dropout. The error for a real difference names the field."""
    a = _saved(tmp_path, [1], dropout=0.1)
    b = _saved(tmp_path / "x", [2], dropout=0.3, attention_dropout=0.2, ponder_cost=0.1)
    avg = average_checkpoints(a + b)
    assert (avg.config.dropout, avg.config.attention_dropout, avg.config.ponder_cost) == (0.1, 0.0, 0.01)
    _assert_mean_of(avg, a + b)
    c = _saved(tmp_path / "y", [3], dropout=0.3, d_ff=32)
    with pytest.raises(DifferentModels, match=r"y/m3/config.json: .*d_ff 32"):
        average_checkpoints(a + c)


def test_same_config_other_vocabulary_is_refused(tmp_path, capsys):
    """Two models alike in config but trained on different vocabularies: each embedding row means
    another token, so `aiayn average` refuses, names both tokenizer files and writes nothing; with the
    same vocabulary (and a checkpoint carrying none, taken as the first one's) it averages."""
    from aiayn.cli import main
    from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, load_tokenizers, save_tokenizers

    a, b, bare = _saved(tmp_path, [1, 2, 3])
    vocab = [f"w{i}" for i in range(VOCAB - 4)]
    save_tokenizers(TokenizerPair.shared(SymbolTokenizer(vocab)), a)
    save_tokenizers(TokenizerPair.shared(SymbolTokenizer(vocab[::-1])), b)  # the same size, another order
    assert main(["average", str(a), str(b), "-o", str(tmp_path / "avg")]) == 2
    err = capsys.readouterr().err
    assert f"{b}/tokenizer.json" in err and f"{a}/tokenizer.json" in err and "vocabular" in err
    assert not (tmp_path / "avg").exists()
    with pytest.raises(DifferentModels, match="another vocabulary"):
        check_same_vocabulary([a, b], load_tokenizers(a), a)

    save_tokenizers(TokenizerPair.shared(SymbolTokenizer(vocab)), b)
    assert main(["average", str(a), str(b), str(bare), "-o", str(tmp_path / "avg")]) == 0
    _assert_mean_of(Transformer.from_pretrained(tmp_path / "avg"), [a, b, bare])


def test_the_output_replaces_only_a_model_directory_whole_and_never_an_input(tmp_path, capsys):
    """A model directory there is replaced whole: no file of the old one (an lm's task.json, say) stays to
    change what the average answers as. A directory of other files, or a checkpoint averaged, is refused."""
    import json

    from aiayn.cli import main
    from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers

    a, b = _saved(tmp_path, [1, 2])
    for path in (a, b):
        save_tokenizers(TokenizerPair.shared(SymbolTokenizer([f"w{i}" for i in range(VOCAB - 4)])), path)
    out = _saved(tmp_path, [3])[0]  # a model directory, with a task.json the checkpoints do not have
    (out / "task.json").write_text(json.dumps({"task": "lm", "block": 8}))
    assert main(["average", str(a), str(b), "-o", str(out)]) == 0
    assert not (out / "task.json").exists()
    _assert_mean_of(Transformer.from_pretrained(out), [a, b])
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("keep")
    assert main(["average", str(a), str(b), "-o", str(notes)]) == 2
    assert "notes: exists and is not a model directory" in capsys.readouterr().err
    weights = (a / "model.safetensors").read_bytes()
    assert main(["average", str(a), str(b), "-o", str(a)]) == 2
    assert "is, or holds, an input" in capsys.readouterr().err
    assert (a / "model.safetensors").read_bytes() == weights and (notes / "a.txt").read_text() == "keep"
