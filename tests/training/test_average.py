import pytest
import torch

from aiayn.models.transformer import Transformer
from aiayn.training.average import DifferentModels, average_checkpoints, average_state

from training_helpers import tiny_config


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


def test_average_of_one_is_identity(tmp_path):
    (path,) = _saved(tmp_path, [4])
    state = average_state([path])
    ref = Transformer.from_pretrained(path).state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in state.items())


def test_mismatched_configs_are_an_error(tmp_path):
    a = _saved(tmp_path, [1])
    b = _saved(tmp_path / "x", [2], d_ff=32)
    with pytest.raises(ValueError, match="different model configs"):
        average_checkpoints(a + b)
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        average_state([tmp_path / "nothing"])


def test_configs_differing_only_in_dropout_average(tmp_path):
    """A dropout changes training, not the function the weights compute: such checkpoints average,
    and the model keeps the first one's dropout. The error for a real difference names the field."""
    a = _saved(tmp_path, [1], dropout=0.1)
    b = _saved(tmp_path / "x", [2], dropout=0.3)
    avg = average_checkpoints(a + b)
    assert avg.config.dropout == 0.1
    _assert_mean_of(avg, a + b)
    c = _saved(tmp_path / "y", [3], dropout=0.3, d_ff=32)
    with pytest.raises(DifferentModels, match=r"y/m3/config.json: .*d_ff 32"):
        average_checkpoints(a + c)
