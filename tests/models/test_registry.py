"""The model registry: model_type in config.json, one loader for every model type."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from aiayn.config import ConfigError, TransformerConfig
from aiayn.models import DEFAULT_MODEL_TYPE, MODEL_TYPES, Transformer, build_model, load_model, read_config
from aiayn.training.average import average_checkpoints


def tiny() -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig.preset("tiny", src_vocab_size=16))


def test_saved_config_names_its_model_type_and_loads_back(tmp_path):
    tiny().save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "encoder-decoder"
    model_type, config = read_config(tmp_path)
    assert model_type == "encoder-decoder" and config == tiny().config
    assert isinstance(load_model(tmp_path), MODEL_TYPES[model_type])
    assert isinstance(build_model(model_type, config), Transformer)


def test_config_without_model_type_is_the_encoder_decoder(tmp_path):
    tiny().save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    del data["model_type"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert DEFAULT_MODEL_TYPE == "encoder-decoder" and isinstance(load_model(tmp_path), Transformer)


def test_unknown_model_type_and_changed_special_ids_name_the_file(tmp_path):
    tiny().save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**data, "model_type": "perceiver"}))
    with pytest.raises(ValueError, match="config.json.*unknown model_type 'perceiver'"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**data, "eos_id": 5}))
    with pytest.raises(ValueError, match="config.json.*eos_id must be 2"):
        load_model(tmp_path)


def test_special_ids_are_constants_not_fields():
    """One source of truth: a config cannot move EOS away from what tokenizers and batches use."""
    with pytest.raises(TypeError):
        TransformerConfig(eos_id=5)
    assert TransformerConfig.from_dict({**tiny().config.to_dict(), "pad_id": 0, "bos_id": 1, "eos_id": 2}) == tiny().config
    with pytest.raises(ConfigError, match="bos_id must be 1"):
        TransformerConfig.from_dict({**tiny().config.to_dict(), "bos_id": 3})


def test_average_goes_through_the_registry(tmp_path):
    a, b = tiny(), tiny()
    with torch.no_grad():
        for p in b.parameters():
            p.add_(1.0)
    a.save_pretrained(tmp_path / "a")
    b.save_pretrained(tmp_path / "b")
    mean = average_checkpoints([tmp_path / "a", tmp_path / "b"])
    assert type(mean) is Transformer
    torch.testing.assert_close(mean.decoder.layers[0].ff.linear1.bias, a.decoder.layers[0].ff.linear1.bias + 0.5)


def test_a_config_json_that_is_not_utf8_names_the_file_and_line(tmp_path):
    Transformer(TransformerConfig.preset("tiny", src_vocab_size=20)).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_bytes(path.read_bytes().replace(b"{", b'{"note": "caf\xe9",', 1))
    with pytest.raises(ValueError, match=r"config\.json:1: invalid UTF-8"):
        read_config(tmp_path)


def test_load_model_takes_the_files_tensors_tied_as_saved_and_names_a_missing_one(tmp_path):
    """Built on the meta device, no weight drawn (the caller's random state untouched), every tensor the
    file's, a tied matrix one tensor again; a file without a tensor the model needs is refused, naming it."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=20)).eval()
    model.save_pretrained(tmp_path / "m")
    state = torch.random.get_rng_state()
    loaded = load_model(tmp_path / "m")
    assert torch.equal(torch.random.get_rng_state(), state)
    assert loaded.decoder.embed.weight is loaded.encoder.embed.weight
    assert not any(t.is_meta for t in (*loaded.parameters(), *loaded.buffers()))
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    weights = load_file(tmp_path / "m" / "model.safetensors")
    del weights["decoder.layers.0.ff.linear1.bias"]
    save_file(weights, tmp_path / "m" / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors: cannot load weights \(missing: decoder\.layers\.0\.ff\.linear1\.bias"):
        load_model(tmp_path / "m")
