import pytest
import torch

from aiayn.models.transformer import Transformer
from aiayn.training.average import average_checkpoints, average_state

from training_helpers import tiny_config


def _saved(tmp_path, seeds, **cfg):
    paths = []
    for s in seeds:
        torch.manual_seed(s)
        paths.append(Transformer(tiny_config(**cfg)).save_pretrained(tmp_path / f"m{s}"))
    return paths


def test_average_equals_manual_mean(tmp_path):
    paths = _saved(tmp_path, [1, 2, 3])
    models = [Transformer.from_pretrained(p) for p in paths]
    avg = average_checkpoints(paths)
    for name, p in avg.named_parameters():
        manual = sum(dict(m.named_parameters())[name] for m in models) / 3
        torch.testing.assert_close(p, manual, rtol=0, atol=1e-7, msg=name)
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
