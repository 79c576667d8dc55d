"""Configuration: frozen dataclasses holding every paper default in exactly one place.

The defaults below are those of Vaswani et al. (2017), "Attention Is All You Need":
the base model of Table 3 (§3, §6.2), the training recipe of §5.3-§5.4 and the
decoding settings of §6.1. Presets only override fields; they never restate a default.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import typing
from dataclasses import dataclass
from types import MappingProxyType, NoneType, UnionType
from typing import Any, Iterable, Mapping, Optional, Sequence

# Special token ids: the one source of truth, fixed for every vocabulary (subword or
# synthetic) and every model. Tokenizers, batches, losses and decoders all read these.
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_IDS = MappingProxyType({"pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID})


DEFAULT_BATCH_TOKENS = 4096  # padded source tokens per inference batch; a speed knob, not a paper setting

# Feed-forward activations (§3.3 uses ReLU). "gelu" is the exact (erf) GELU of BERT and ViT;
# "gelu_tanh" its tanh approximation (GPT-2's gelu_new); "silu" is x·sigmoid(x) (Marian's swish).
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
# Sinusoid layouts (§3.5): "interleaved" puts sin and cos of one frequency in dims 2i, 2i+1 (the
# paper's); "halves" puts every sine first, then every cosine (Marian, CTranslate2, tensor2tensor).
SINUSOID_LAYOUTS = ("interleaved", "halves")
SOURCE_UNITS = ("tokens", "sentences")
ATTENTION_SCORES = ("scaled_dot", "dot", "additive")  # §3.2.1: the paper's, and the two it compares with


# The Universal Transformer (Dehghani et al., 2019): "universal" applies one layer per stack again and
# again in depth, its weights shared; "act" lets each encoder position stop (Graves, 2016).
RECURRENCES = ("none", "universal")
HALTINGS = ("none", "act")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field."""


def training_only(default: Any) -> Any:
    """A model config field that shapes training but not the trained function (dropout rates, the ponder
    cost): checkpoints that differ only in such fields are one model, and `aiayn average` may mix them."""
    return dataclasses.field(default=default, metadata={"training_only": True})


def training_only_names(config: Any) -> frozenset[str]:
    """The names of a config dataclass's (class or instance) fields declared with `training_only`."""
    return frozenset(f.name for f in dataclasses.fields(config) if f.metadata.get("training_only"))


def check(cond: bool, message: str) -> None:
    """The one check of every config: a ConfigError saying `message` unless `cond`."""
    if not cond:
        raise ConfigError(message)


def check_sizes(config: Any, *names: str) -> None:
    """The fields `names` of `config` (sizes and counts) are at least 1."""
    for name in names:
        check(getattr(config, name) >= 1, f"{name} must be at least 1, got {getattr(config, name)}")


@dataclass(frozen=True, kw_only=True)
class RecurrenceOptions:
    """The Universal Transformer's options (Dehghani et al., 2019, §2), shared by the encoder-decoder
    and the encoder-only model: `recurrence = "universal"` makes each stack one layer applied
    `depth_steps` times with shared weights (0: as many times as the stack has layers), a timestep
    signal added before every step (§2.1); `halting = "act"` gives every encoder position a halting
    unit (§2.2, Graves' adaptive computation time), `depth_steps` then being the most steps, and
    adds `ponder_cost` times the mean number of steps taken to the loss per target."""

    recurrence: str = "none"  # one of RECURRENCES
    depth_steps: int = 0  # universal: steps per stack; 0 = the stack's layer count
    halting: str = "none"  # one of HALTINGS; "act" halts the encoder's positions (the decoder runs every step)
    ponder_cost: float = training_only(0.01)  # act: the loss weight of the mean ponder time (the UT code's act_loss_weight)

    def check_recurrence(self) -> None:
        check_choice("recurrence", self.recurrence, RECURRENCES)
        check_choice("halting", self.halting, HALTINGS)
        check(self.depth_steps >= 0, f"depth_steps must be >= 0, got {self.depth_steps}")
        check(0 <= self.ponder_cost < math.inf, f"ponder_cost must be a finite number >= 0, got {self.ponder_cost}")
        check(self.halting == "none" or self.recurrence == "universal",
               "halting = 'act' needs recurrence = 'universal': it halts the steps of a shared layer")
        check(self.recurrence == "universal" or self.depth_steps == 0,
               "depth_steps counts the steps of recurrence = 'universal'; set that too")

    @property
    def universal(self) -> bool:
        return self.recurrence == "universal"

    @property
    def act(self) -> bool:
        return self.halting == "act"

    def steps(self, n_layers: int) -> int:
        """How many times a universal stack of `n_layers` configured layers applies its one layer."""
        return self.depth_steps or n_layers


@dataclass(frozen=True, kw_only=True)
class LayerOptions:
    """What every model built of `aiayn.modules.layers` sets, with the paper's base values (Table 3): a
    model config inherits these and restates only the defaults it changes. `check_layers` is their one
    validator; the modules built from a checked config check nothing again."""

    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    dropout: float = training_only(0.1)  # residual + embedding dropout, P_drop of §5.4
    attention_dropout: float = training_only(0.0)  # on attention weights; not in the paper
    activation_dropout: float = training_only(0.0)  # inside the FFN; not in the paper
    attention_score: str = "scaled_dot"  # §3.2.1: "scaled_dot" (the paper's), "dot" or "additive" (its comparison)
    activation: str = "relu"  # the FFN's (§3.3: ReLU); one of ACTIVATIONS (BERT's "gelu", GPT-2's "gelu_tanh")
    norm_first: bool = False  # False: post-norm, as in the paper; True: pre-norm
    layer_norm_eps: float = 1e-5
    positional: str = "sinusoidal"  # "sinusoidal" (§3.5) or "learned"
    max_positions: int = 1024  # learned table size; sinusoidal extends on demand
    scale_embeddings: bool = True  # §3.4: embeddings times sqrt(d_model)
    logits_bias: bool = False  # a bias (V,) added to the output logits (Marian's final_logits_bias, BERT's MLM bias)

    def check_layers(self) -> None:
        """Sizes of at least 1 that the heads divide, dropout rates in [0, 1), a known attention score,
        activation and position kind, a finite positive layer-norm ε."""
        check_sizes(self, "d_model", "n_heads", "d_ff", "max_positions")
        check(self.d_model % self.n_heads == 0, f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            p = getattr(self, name)
            check(0.0 <= p < 1.0, f"{name} must be in [0, 1), got {p}")
        check_choice("attention_score", self.attention_score, ATTENTION_SCORES)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("positional", self.positional, ("sinusoidal", "learned"))
        check(0 < self.layer_norm_eps < math.inf, f"layer_norm_eps must be a finite number > 0, got {self.layer_norm_eps}")


@dataclass(frozen=True)
class TransformerConfig(RecurrenceOptions, LayerOptions):
    """Model hyper-parameters. Defaults are the paper's base model (Table 3).

    `share_embeddings=None` resolves to True when the source and target vocabularies
    are of equal size, as a joint vocabulary is (§3.4); False otherwise. Sizes are all a config
    sees: a task with two vocabularies of equal size turns it off (`tasks.seq2seq.apart`).
    """

    src_vocab_size: int = 37000
    tgt_vocab_size: Optional[int] = None  # None: same as source (joint vocabulary)
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    source_positions: str = "start"  # "start": §3.5, 0 at the first source token; "end": 0 at the last
    copy_attention: bool = False  # mix in copying source tokens (See et al., 2017); not in the paper
    source_units: str = "tokens"  # "sentences": the encoder reads one vector per sentence (aiayn.modules.sentences)
    sentence_ends: tuple[int, ...] = ()  # with "sentences": ids of the tokens that end one (set by the qa task)
    share_embeddings: Optional[bool] = None  # §3.4: one matrix for source and target
    tie_output: bool = True  # §3.4: pre-softmax projection = target embedding
    sinusoid_layout: str = "interleaved"  # §3.5's; "halves": [sin | cos] (Marian); one of SINUSOID_LAYOUTS

    def __post_init__(self) -> None:
        check_types(type(self), vars(self))
        if self.tgt_vocab_size is None:
            object.__setattr__(self, "tgt_vocab_size", self.src_vocab_size)
        if self.share_embeddings is None:
            object.__setattr__(self, "share_embeddings", self.src_vocab_size == self.tgt_vocab_size)
        object.__setattr__(self, "sentence_ends", tuple(self.sentence_ends))  # config.json holds a list
        self._validate()

    def _validate(self) -> None:
        check_sizes(self, "src_vocab_size", "tgt_vocab_size", "n_encoder_layers", "n_decoder_layers")
        self.check_layers()
        check(self.source_positions in ("start", "end"),
               f"source_positions must be 'start' or 'end', got {self.source_positions!r}")
        check(not (self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size),
               "share_embeddings needs a joint vocabulary (src_vocab_size == tgt_vocab_size)")
        check(not self.copy_attention or self.src_vocab_size == self.tgt_vocab_size,
               "copy_attention needs a joint vocabulary (src_vocab_size == tgt_vocab_size): a copied "
               "source id must mean the same target token")
        check_choice("source_units", self.source_units, SOURCE_UNITS)
        check(self.source_units == "tokens" or not self.copy_attention,
               "copy_attention copies source tokens; with source_units = 'sentences' the encoder's units are sentences")
        check_choice("sinusoid_layout", self.sinusoid_layout, SINUSOID_LAYOUTS)
        check(UNK_ID < min(self.src_vocab_size, self.tgt_vocab_size),
               f"both vocabularies must hold the {UNK_ID + 1} special ids")
        self.check_recurrence()

    @property
    def width(self) -> int:
        """The model width the learning-rate schedule scales with (§5.3: d_model^-0.5)."""
        return self.d_model

    @property
    def depth(self) -> str:
        """Encoder + decoder layers, as Table 3 counts them ("6+6")."""
        return f"{self.n_encoder_layers}+{self.n_decoder_layers}"

    @classmethod
    def for_vocab(cls, preset: str, src_vocab_size: int, tgt_vocab_size: int, **overrides: Any) -> "TransformerConfig":
        """The preset's config for vocabularies of these sizes (a recipe's `[model]`)."""
        return cls.preset(preset, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, **overrides)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "TransformerConfig":
        """A named preset (`tiny`, `small`, `base`, `big`) with optional field overrides."""
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TransformerConfig":
        """Fields from a saved config.json. Files written before the special ids became
        constants carry pad_id/bos_id/eos_id: accepted when they equal the constants."""
        data = dict(data)
        for key, fixed in SPECIAL_IDS.items():
            if key in data and data.pop(key) != fixed:
                raise ConfigError(f"{key} must be {fixed}: special ids are fixed (aiayn.config.SPECIAL_IDS)")
        return cls(**known_fields(cls, data, "model config"))  # __post_init__ checks the types


# Only differences from the base defaults above. `big` is Table 3's "big" row
# (P_drop 0.3 for EN-DE); `small` and `tiny` are ours, for CPUs and tests.
PRESETS: Mapping[str, dict[str, Any]] = MappingProxyType({
    "base": {},
    "big": {"d_model": 1024, "n_heads": 16, "d_ff": 4096, "dropout": 0.3},
    "small": {"d_model": 256, "n_heads": 4, "n_encoder_layers": 3, "n_decoder_layers": 3, "d_ff": 1024},
    "tiny": {"d_model": 32, "n_heads": 2, "n_encoder_layers": 2, "n_decoder_layers": 2, "d_ff": 64},
})


@dataclass(frozen=True)
class OptimConfig:
    """Optimiser and loss settings of §5.3-§5.4."""

    label_smoothing: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    warmup_steps: int = 4000
    lr_factor: float = 1.0  # scales d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    clip_norm: float = 0.0  # 0 disables; the paper does not clip
    weight_decay: float = 0.0  # decoupled, as AdamW (training.schedule.adam)

    def __post_init__(self) -> None:
        check_types(type(self), vars(self))
        check(0.0 <= self.label_smoothing < 1.0, f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        check(len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas),
               f"betas must be two numbers in [0, 1), got {self.betas}")
        object.__setattr__(self, "betas", tuple(self.betas))
        check(0 < self.eps < math.inf, f"eps must be a finite number > 0, got {self.eps}")
        check_sizes(self, "warmup_steps")
        check(0 < self.lr_factor < math.inf, f"lr_factor must be a finite number > 0, got {self.lr_factor}")
        check(self.clip_norm >= 0, f"clip_norm must be >= 0, got {self.clip_norm}")  # inf: no clipping, as 0
        check(0 <= self.weight_decay < math.inf, f"weight_decay must be a finite number >= 0, got {self.weight_decay}")


DECODE_METHODS = ("beam", "greedy", "sample")
LENGTH_PENALTY_FORMS = ("gnmt", "plain")  # ((5+|Y|)/6)^α, GNMT's and the paper's; |Y|^α, fairseq's and Hugging Face's


@dataclass(frozen=True)
class DecodeConfig:
    """Decoding settings of §6.1: beam 4, length penalty α = 0.6, max length = a·|src| + b."""

    method: str = "beam"  # "beam" (beam_size 1 = greedy) | "greedy" | "sample" (see SamplingConfig)
    beam_size: int = 4
    length_penalty: float = 0.6  # α
    length_penalty_form: str = "gnmt"  # "gnmt": ((5+|Y|)/6)^α (the paper's); "plain": |Y|^α
    max_len_a: float = 1.0
    max_len_b: int = 50
    min_len: int = 0  # n > 0: no EOS before n tokens (fairseq --min-len, Hugging Face min_length); not in the paper
    nbest: int = 1
    no_repeat_ngram_size: int = 0  # n > 0: no n-gram twice in an output (fairseq, Hugging Face); not in the paper

    def __post_init__(self) -> None:
        check_types(type(self), vars(self))
        check(self.method in DECODE_METHODS, f"method must be one of {', '.join(DECODE_METHODS)}, got {self.method!r}")
        check_sizes(self, "beam_size")
        check(0 <= self.length_penalty < math.inf, f"length_penalty must be a finite number >= 0, got {self.length_penalty}")
        check(self.length_penalty_form in LENGTH_PENALTY_FORMS,
               f"length_penalty_form must be one of {', '.join(LENGTH_PENALTY_FORMS)}, got {self.length_penalty_form!r}")
        check(0 <= self.max_len_a < math.inf, f"max_len_a must be a finite number >= 0, got {self.max_len_a}")
        check(self.max_len_b >= 0, f"max_len_b must be >= 0, got {self.max_len_b}")
        check(self.min_len >= 0, f"min_len must be >= 0, got {self.min_len}")
        check(self.no_repeat_ngram_size >= 0, f"no_repeat_ngram_size must be >= 0, got {self.no_repeat_ngram_size}")
        check(1 <= self.nbest <= self.beam_size,
               f"nbest must be in [1, beam_size={self.beam_size}], got {self.nbest}")


@dataclass(frozen=True)
class SamplingConfig:
    """Ancestral sampling (`aiayn.decoding.sample`): softmax(logits / temperature),
    restricted to the top_k most probable tokens and the top_p nucleus. Not in the paper."""

    temperature: float = 1.0
    top_k: int = 0  # 0 keeps every token
    top_p: float = 1.0  # 1.0 keeps every token
    seed: Optional[int] = None  # None: torch's global generator

    def __post_init__(self) -> None:
        check_types(type(self), vars(self))
        check(math.isfinite(self.temperature) and self.temperature > 0,
               f"temperature must be a finite number > 0, got {self.temperature}")
        check(self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}")
        check(math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0,
               f"top_p must be a finite number in (0, 1], got {self.top_p}")
        check(self.seed is None or fits_64_bits(self.seed),  # what torch.Generator.manual_seed takes
               f"seed must be from -2**63 to 2**64 - 1, got {self.seed}")


def fits_64_bits(value: int) -> bool:
    """Within what a 64-bit integer holds, signed or not (torch's seeds; no request field takes more)."""
    return -2**63 <= value < 2**64


def check_sampling_use(method: str, given: Iterable[str]) -> None:
    """Sampling settings among the names `given` (temperature, top_k, top_p) only with method 'sample':
    any other method would ignore them. A seed is harmless anywhere: one body may serve every method."""
    used = sorted(set(given) & {"temperature", "top_k", "top_p"})
    check(not used or method == "sample",
           f"{', '.join(used)} set for sampling, but the method is {method!r}: add method 'sample' (--method sample)")


def check_choice(name: str, value: Any, choices: tuple) -> None:
    """`value` of field `name` is one of `choices`; the error names the field and the choices."""
    check(value in choices, f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def check_types(cls: type, data: Mapping[str, Any], prefix: str = "") -> None:
    """Each value of `data` must have the type its field of dataclass `cls` declares: ints
    are not floats (10.5 is no update count), bools are true/false only, strings are strings.
    A float field takes an int. The error names the key (`prefix` + name) and the type."""
    hints = _field_types(cls)
    for key, value in data.items():
        if key in hints and not _is_instance(value, hints[key]):
            raise ConfigError(f"{prefix}{key} must be {_type_name(hints[key])}, got {value!r}")


@functools.cache
def _field_types(cls: type) -> Mapping[str, Any]:
    """{field: its declared type} of dataclass `cls`, resolved once: `typing.get_type_hints` is most
    of what building a config costs."""
    hints = typing.get_type_hints(cls)
    return MappingProxyType({f.name: hints[f.name] for f in dataclasses.fields(cls)})


def _is_instance(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, UnionType):
        return any(_is_instance(value, a) for a in args)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]: any length
        return isinstance(value, (list, tuple)) and all(_is_instance(v, args[0]) for v in value)
    if origin is tuple:
        return (isinstance(value, (list, tuple)) and len(value) == len(args)
                and all(_is_instance(v, a) for v, a in zip(value, args)))
    if hint is NoneType:
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"a list of {_type_name(args[0])}s"
    if origin is tuple:
        return f"a list of {len(args)} ({', '.join(_type_name(a) for a in args)})"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", NoneType: "unset"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def known_fields(cls: type, data: dict, what: str) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown {what} key(s): {', '.join(unknown)}{did_you_mean(unknown, names)}; "
                          f"known: {', '.join(sorted(names))}")
    return dict(data)


def did_you_mean(unknown: Sequence[str], known: Iterable[str], prefix: str = "") -> str:
    """" (did you mean d_model?)" for the unknown names that are a likely typo of a known one, else ""."""
    known = sorted(known)
    guesses = [prefix + close[0] for name in unknown if (close := difflib.get_close_matches(name, known, n=1))]
    return f" (did you mean {', '.join(guesses)}?)" if guesses else ""


__all__ = [
    "PAD_ID", "BOS_ID", "EOS_ID", "UNK_ID", "SPECIAL_IDS", "ConfigError", "SamplingConfig", "TransformerConfig", "OptimConfig",
    "DecodeConfig", "PRESETS", "ACTIVATIONS", "SINUSOID_LAYOUTS", "check_choice",
]
