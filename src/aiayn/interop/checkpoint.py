"""Reading a Hugging Face model directory, and the weight tables that map it onto aiayn's.

A `Checkpoint` is config.json plus safetensors weights (model.safetensors, or shards listed by
model.safetensors.index.json). Weights are read with safetensors only: a directory holding
pickled weights alone (pytorch_model.bin) is refused.

A family module (`interop.marian`, `.gpt2`, `.bert`, `.vit`) lists its weights as `Param`s: an
aiayn state-dict name, the Hugging Face names it is made of, and the two conversions, so that
one table serves import (`load_params`) and export (`dump_params`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch import Tensor

from aiayn.io import read_json_object, read_tensors, tensor_names
from aiayn.models.base import CONFIG_FILE

WEIGHTS, INDEX = "model.safetensors", "model.safetensors.index.json"


class Unsupported(ValueError):
    """A checkpoint or a model with a setting that does not map; the message names it, in one line."""


class Checkpoint:
    """A Hugging Face model directory: `config` (config.json) and its tensors, read lazily."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        path = self.directory / CONFIG_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found; is {directory} a Hugging Face model directory?")
        self.config: dict = read_json_object(path)
        self.files = self._weight_files()
        self.names = {name: file for file, names in self.files.items() for name in names}

    def _weight_files(self) -> dict[Path, list[str]]:
        d = self.directory
        if (d / INDEX).is_file():
            weight_map = read_json_object(d / INDEX).get("weight_map")
            if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
                raise ValueError(f"{d / INDEX}: no 'weight_map' of tensor names to shard files")
            files = sorted({d / f for f in weight_map.values()})
        elif (d / WEIGHTS).is_file():
            files = [d / WEIGHTS]
        else:
            pickled = [p.name for p in d.glob("*.bin")]
            hint = f" ({', '.join(pickled)} is pickled and never read: save it as safetensors)" if pickled else ""
            raise FileNotFoundError(f"{d / WEIGHTS}: not found{hint}")
        out = {}
        for f in files:
            out[f] = tensor_names(f)
        return out

    def field(self, name: str, default: Any = None) -> Any:
        return self.config.get(name, default)

    def need(self, name: str, value: Any = None) -> int:
        """A whole-number field the model cannot be built without (a size): config.json's, or `value` read
        from it; its absence is an error naming the file."""
        value = self.config.get(name) if value is None else value
        if type(value) is not int or value < 1:
            raise Unsupported(f"{self.directory / CONFIG_FILE}: {name} must be a positive whole number, got "
                              f"{'nothing' if value is None else repr(value)}")
        return value

    def token_id(self, name: str) -> int:
        """A special token's id in config.json (0 is one): without it the vocabulary cannot be mapped."""
        value = self.config.get(name)
        if type(value) is not int or value < 0:
            raise Unsupported(f"{self.directory / CONFIG_FILE}: {name} must be a token id (a whole number >= 0), got "
                              f"{'nothing' if value is None else repr(value)}")
        return value

    def labels(self) -> list[str]:
        """The class names of `id2label` (keys "0".."n-1", or whole numbers), else LABEL_0.. for `num_labels`."""
        id2label = self.field("id2label") or {str(i): f"LABEL_{i}" for i in range(self.need("num_labels", self.field("num_labels", 2)))}
        by_id = {str(k): v for k, v in id2label.items()} if isinstance(id2label, dict) else {}
        if sorted(by_id) != sorted(map(str, range(len(by_id)))) or not by_id:
            raise Unsupported(f"{self.directory / CONFIG_FILE}: id2label must map every id 0..n-1 to a name, "
                              f"got {id2label!r}")
        return [str(by_id[str(i)]) for i in range(len(by_id))]

    def has(self, name: str) -> bool:
        return self._find(name) is not None

    def _find(self, name: str) -> str | None:
        """`name`, or `name` without its first component (weights saved from the base model, e.g.
        GPT-2's `h.0...` for `transformer.h.0...`)."""
        if name in self.names:
            return name
        short = name.partition(".")[2]
        return short if short in self.names else None

    def tensor(self, name: str) -> Tensor:
        """The tensor `name`, in float32 (aiayn models are float32)."""
        found = self._find(name)
        if found is None:
            raise Unsupported(f"{self.directory}: no weight {name!r} in the checkpoint")
        return read_tensors(self.names[found], [found])[found].float()

    def refuse(self, field: str, value: Any, why: str) -> Unsupported:
        return Unsupported(f"{self.directory / CONFIG_FILE}: {field} = {value!r} does not map onto aiayn ({why})")

    def check_architecture(self, *known: str) -> str:
        """The checkpoint's class (`architectures[0]`), one of `known`; a config that names none is taken
        as the first. Another head on the same body (GPT-2 for classification, say) is refused, not
        imported without it."""
        found = self.field("architectures") or [known[0]]
        if not isinstance(found, list) or found[0] not in known:
            raise self.refuse("architectures", found, f"aiayn imports {' and '.join(known)} here")
        return found[0]


# -- weight tables ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """aiayn's tensor `aiayn` is `into([Hugging Face tensors named hf])`; `out` gives them back.
    `optional`: the checkpoint may lack it (the aiayn tensor then keeps its initial value)."""

    aiayn: str
    hf: tuple[str, ...]
    into: Callable[[list[Tensor]], Tensor]
    out: Callable[[Tensor], list[Tensor]]
    optional: bool = False


def same(aiayn: str, hf: str, optional: bool = False) -> Param:
    return Param(aiayn, (hf,), lambda ts: ts[0], lambda t: [t], optional)


def transposed(aiayn: str, hf: str) -> Param:
    """GPT-2's Conv1D stores (in, out); a Linear (out, in)."""
    return Param(aiayn, (hf,), lambda ts: ts[0].t(), lambda t: [t.t()])


def stacked(aiayn: str, hf: Sequence[str]) -> Param:
    """Our in_proj stacks W^Q, W^K, W^V (3D, D), and their biases (3D,); Hugging Face keeps three."""
    return Param(aiayn, tuple(hf), lambda ts: torch.cat(ts, 0), lambda t: list(t.chunk(len(hf), 0)))


def linear(aiayn: str, hf: str, make: Callable[[str, str], Param] = same) -> list[Param]:
    """Weight and bias of a linear map (or a LayerNorm's weight and bias)."""
    return [make(f"{aiayn}.weight", f"{hf}.weight"), same(f"{aiayn}.bias", f"{hf}.bias")]


def attention(aiayn: str, q: str, k: str, v: str, out: str) -> list[Param]:
    """One `MultiHeadAttention` from separate query, key, value and output linear maps."""
    return [stacked(f"{aiayn}.in_proj.{p}", [f"{n}.{p}" for n in (q, k, v)]) for p in ("weight", "bias")] + \
        linear(f"{aiayn}.out_proj", out)


def load_params(model: torch.nn.Module, params: Iterable[Param], ckpt: Checkpoint, ignored: Sequence[str] = ()) -> None:
    """Fill `model` from the checkpoint through `params`: every tensor of the model must be covered, and every
    tensor of the checkpoint used, but those matching an `ignored` pattern (fnmatch: buffers transformers
    saves, heads an import drops and says so)."""
    params = list(params)
    state = model.state_dict()
    covered = set()
    for p in params:
        covered.add(p.aiayn)
        if p.optional and not all(ckpt.has(n) for n in p.hf):
            continue
        value = p.into([ckpt.tensor(n) for n in p.hf])
        if value.shape != state[p.aiayn].shape:
            raise Unsupported(f"{ckpt.directory}: {', '.join(p.hf)} has shape {tuple(value.shape)}, aiayn's "
                              f"{p.aiayn} {tuple(state[p.aiayn].shape)}")
        state[p.aiayn] = value
    missing = sorted(set(state) - covered)
    if missing:
        raise Unsupported(f"{ckpt.directory}: nothing in the checkpoint for aiayn's {', '.join(missing[:3])}")
    used = {ckpt._find(n) for p in params for n in p.hf}
    unused = sorted(n for n in set(ckpt.names) - used if not any(fnmatch(n, pattern) for pattern in ignored))
    if unused:
        raise Unsupported(f"{ckpt.directory}: {len(unused)} tensors of the checkpoint map onto nothing in aiayn's model "
                          f"({', '.join(unused[:4])}{', ...' if len(unused) > 4 else ''}); does {CONFIG_FILE} describe "
                          "these weights (its layer counts, say)?")
    model.load_state_dict(state)


def dump_params(state: Mapping[str, Tensor], params: Iterable[Param]) -> dict[str, Tensor]:
    """The Hugging Face tensors of an aiayn state dict, contiguous on the CPU, each name once."""
    out: dict[str, Tensor] = {}
    for p in params:
        for name, tensor in zip(p.hf, p.out(state[p.aiayn].detach().float().cpu())):
            out[name] = tensor.contiguous().clone()
    return out


@dataclass
class Imported:
    """What a family makes of a checkpoint: an aiayn model's type and config, the weight table, the
    tokenizers (a `TokenizerPair`, None for images) and task.json."""

    model_type: str
    config: Any
    params: list[Param]
    tokenizers: Any
    task_info: dict
    ignored: tuple[str, ...] = ()  # checkpoint tensors left unused on purpose (fnmatch patterns; `load_params`)


@dataclass
class Exported:
    """What a family makes of an aiayn model: Hugging Face's config.json, its tensors by name, and
    the other files of the directory (tokenizer, generation settings) by name."""

    config: dict
    tensors: dict[str, Tensor]
    files: dict[str, bytes]


def json_file(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def refuse_options(where: str, family: str, found: Mapping[str, tuple[Any, Any]]) -> None:
    """`found`: option -> (its value, the one `family` has); the first that differs is refused."""
    for name, (value, wanted) in found.items():
        if value != wanted:
            raise Unsupported(f"{where}: {name} = {value!r} has no {family} counterpart (it needs {wanted!r})")


# Hugging Face's activation names (transformers' ACT2FN) -> aiayn's (`aiayn.config.ACTIVATIONS`), and back.
ACTIVATIONS_IN = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                  "swish": "silu", "silu": "silu"}
ACTIVATIONS_OUT = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "swish"}


def activation_in(ckpt: Checkpoint, field: str, default: str) -> str:
    name = ckpt.field(field, default)
    if name not in ACTIVATIONS_IN:
        raise ckpt.refuse(field, name, f"aiayn has {', '.join(ACTIVATIONS_IN)}")
    return ACTIVATIONS_IN[name]
