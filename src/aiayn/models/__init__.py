"""The model registry: one `model_type` name per model class, saved in every config.json.

    build_model(model_type, config)  a fresh model
    read_config(directory)           (model_type, config) of a model directory
    load_model(directory)            the model saved there, whatever its type

Directories written before `model_type` existed have none and load as the encoder-decoder.
A new model type: a `PretrainedModel` subclass implementing the decoding interface
(`aiayn.decoding.interface`), added to `MODEL_TYPES`.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import torch

from aiayn.config import ConfigError
from aiayn.io import read_utf8
from aiayn.models.base import CONFIG_FILE, MODEL_TYPE_KEY, WEIGHTS_FILE, PretrainedModel
from aiayn.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from aiayn.models.encoder_only import EncoderOnly, EncoderOnlyConfig
from aiayn.models.rnn import RNNConfig, RNNEncoderDecoder
from aiayn.models.transformer import Transformer, count_parameters

MODEL_TYPES: Mapping[str, type[PretrainedModel]] = MappingProxyType({
    Transformer.model_type: Transformer,
    RNNEncoderDecoder.model_type: RNNEncoderDecoder,  # the recurrent baseline (Bahdanau / Luong attention)
    DecoderOnly.model_type: DecoderOnly,  # GPT: the decoder without cross-attention
    EncoderOnly.model_type: EncoderOnly,  # BERT and ViT: the encoder with a [CLS] position
})
DEFAULT_MODEL_TYPE = Transformer.model_type  # for config.json files without a model_type


def model_class(model_type: str) -> type[PretrainedModel]:
    if model_type not in MODEL_TYPES:
        raise ConfigError(f"unknown model_type {model_type!r}; known: {', '.join(MODEL_TYPES)}")
    return MODEL_TYPES[model_type]


def build_model(model_type: str, config: Any) -> PretrainedModel:
    return model_class(model_type)(config)


def read_config(directory: str | Path) -> tuple[str, Any]:
    """(model_type, config) from directory/config.json; errors name the file."""
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; is {directory} a model directory?")
    try:
        data = json.loads(read_utf8(path))
        model_type = data.pop(MODEL_TYPE_KEY, DEFAULT_MODEL_TYPE)
        return model_type, model_class(model_type).config_class.from_dict(data)
    except (json.JSONDecodeError, TypeError, AttributeError, ConfigError) as e:
        raise ValueError(f"{path}: not a valid model config ({e})") from e


def is_model_dir(directory: str | Path) -> bool:
    """Whether `directory` holds an aiayn model (its config.json names one of MODEL_TYPES), not, say, a
    Hugging Face one, whose config.json lists its "architectures"."""
    try:
        read_config(directory)  # a Hugging Face model_type ("marian", "bert", ...) is not one of ours
    except (OSError, ValueError):
        return False
    return True


def load_model(directory: str | Path, device: str | torch.device = "cpu") -> PretrainedModel:
    """Config and weights of a model directory, in eval mode on `device`. The model is built on the meta
    device (no random weights drawn: the caller's random state is left as it was) and takes the file's
    tensors as its own, memory-mapped (`PretrainedModel.assign_weights`)."""
    weights = Path(directory) / WEIGHTS_FILE
    model_type, config = read_config(directory)
    if not weights.is_file():
        raise FileNotFoundError(f"{weights}: not found; is {directory} a model directory?")
    with torch.device("meta"):
        model = build_model(model_type, config)
    model.assign_weights(weights, device)
    return model.to(device).eval()


__all__ = [
    "MODEL_TYPES", "DEFAULT_MODEL_TYPE", "PretrainedModel", "DecoderOnly", "DecoderOnlyConfig", "EncoderOnly",
    "EncoderOnlyConfig", "RNNConfig", "RNNEncoderDecoder", "Transformer", "build_model", "count_parameters",
    "is_model_dir", "load_model", "model_class", "read_config", "CONFIG_FILE", "WEIGHTS_FILE",
]
