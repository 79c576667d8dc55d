"""Export a Transformer encoder-decoder to CTranslate2 (its spec API; the optional `ct2` extra).

An export directory (`export_ctranslate2`) holds:

    model.bin, config.json, shared_vocabulary.json   CTranslate2's model (or source_/target_vocabulary.json
                                                     when the two sides have their own vocabularies)
    tokenizer.json + tokenizer files                 aiayn's tokenizers, as in the model directory
    task.json                                        the model directory's, when it has one (decoding
                                                     defaults, language pair, how sources are cut)
    aiayn_export.json                                this manifest: where it came from and how

What maps onto CTranslate2's `TransformerSpec`: post-norm (the paper) and pre-norm (with the final
norm of each stack), the feed-forward's activation (ReLU, GELU, its tanh form, SiLU), the logits
bias, scaled ("scaled_dot") or unscaled ("dot") dot-product
attention, sinusoidal or learned positions (written out as a table: CTranslate2's built-in
sinusoids put the sines and cosines in two halves, ours interleave them, §3.5), embeddings scaled by
sqrt(d_model) or not, shared or separate embeddings and a tied or separate output projection. Additive
attention has no CTranslate2 counterpart and is refused.

Vocabulary: each side's tokenizer pieces by id, so ids map one to one and the model also works with
the plain sentencepiece model. Sources get EOS from CTranslate2 itself (`add_source_eos`), as aiayn
appends it (`aiayn.decoding.encode_source`); the decoder starts from BOS ("<s>").
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Sequence

from aiayn import __version__
from aiayn.data.tokenizer import load_tokenizers, save_tokenizers
from aiayn.decoding.translator import check_vocab
from aiayn.io import atomic_dir, atomic_write, check_replaceable, read_json_object
from aiayn.model_dir import DEFAULT_TASK, decode_settings, existing, read_task_info, write_task_info
from aiayn.models import CONFIG_FILE, Transformer, load_model, read_config
from aiayn.runtime import MissingExtra

log = logging.getLogger(__name__)

QUANTIZATIONS = ("float32", "int8", "int8_float32")
MANIFEST = "aiayn_export.json"
MANIFEST_VERSION = 1
INSTALL_HINT = "pip install 'aiayn[ct2]'"


class CTranslate2Missing(MissingExtra):
    """ctranslate2 is not installed."""


def require_ctranslate2():
    """The ctranslate2 module, or an error that says how to install it."""
    try:
        import ctranslate2
    except ImportError as e:
        raise CTranslate2Missing(f"ctranslate2 is not installed ({e}); {INSTALL_HINT}") from None
    return ctranslate2


def export_ctranslate2(model_dir: str | Path, out_dir: str | Path, quantization: str = "float32") -> Path:
    """Convert the model directory `model_dir` into the CTranslate2 export directory `out_dir`.

    `quantization` is how the weights are stored: "float32", or "int8" / "int8_float32", which both
    store the weight matrices in int8 (about 4x smaller) and differ in the compute type CTranslate2
    loads them with by default ("int8_float32": float32 for the rest on every device; "int8": its
    choice per device).
    The directory is written beside `out_dir` and renamed into place at the end; an existing
    export there is replaced, any other existing non-empty directory is an error.
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"cannot export {model_dir}: unknown quantization {quantization!r} "
                         f"(choose from {', '.join(QUANTIZATIONS)})")

    ct2 = require_ctranslate2()
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    _check_destination(out_dir, model_dir)
    model, tokenizers, info, decode = _read_model_dir(model_dir)
    with atomic_dir(out_dir, make=False) as tmp:  # CTranslate2's converter makes the directory
        convert_transformer(model, tmp, quantization, _pieces(tokenizers.src, model_dir),
                            _pieces(tokenizers.tgt, model_dir))
        _write_extras(tmp, tokenizers, info, _manifest(model_dir, model, quantization, info, decode, ct2.__version__))
    log.info("exported %s to %s (CTranslate2, %s)", model_dir, out_dir, quantization)
    return out_dir


def read_manifest(export_dir: str | Path) -> dict:
    """The manifest of an export directory; errors name the file."""
    path = Path(export_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; is {export_dir} a directory written by "
                                "`aiayn export ctranslate2`?")
    manifest = read_json_object(path)
    if manifest.get("format") != "ctranslate2":
        raise ValueError(f"{path}: not a CTranslate2 export manifest")
    for key, required in (("positions", True), ("max_input_length", False)):  # the second since 2026-11-28
        value = manifest.get(key)
        if (required or value is not None) and (type(value) is not int or value < 1):
            raise ValueError(f"{path}: {key!r} must be a positive integer, got {value!r}")
    return manifest


# -- the model directory ---------------------------------------------------------------------------
def _read_model_dir(model_dir: Path):
    """(model, tokenizers, task info, its decoding settings) of an exportable model directory; errors name the file."""
    model_type, config = read_config(existing(model_dir))
    if model_type != Transformer.model_type:
        raise ValueError(f"{model_dir / CONFIG_FILE}: a {model_type!r} model; only the Transformer "
                         f"encoder-decoder ({Transformer.model_type!r}) exports to CTranslate2")
    unsupported = {  # what CTranslate2's Transformer spec cannot express -> the settings that export
        "additive attention": (config.attention_score == "additive", "attention_score 'scaled_dot' and 'dot'"),
        "source positions counted from the end": (config.source_positions != "start", "source_positions 'start'"),
        "copy attention": (config.copy_attention, "copy_attention false"),
        "sentences as source units": (config.source_units != "tokens", "source_units 'tokens'"),
    }
    for what, (found, exports) in unsupported.items():
        if found:
            raise ValueError(f"{model_dir / CONFIG_FILE}: {what} has no CTranslate2 counterpart ({exports} exports)")
    model, tokenizers = load_model(model_dir), load_tokenizers(model_dir)
    check_vocab(config, tokenizers, str(model_dir))
    info = read_task_info(model_dir)
    return model, tokenizers, info, decode_settings(info, model_dir)  # a bad setting fails here, before the conversion


def _pieces(tokenizer, model_dir: Path) -> list[str]:
    """Every id's piece, the CTranslate2 vocabulary; pieces must be distinct to map back to ids."""
    pieces = tokenizer.pieces(range(tokenizer.vocab_size))
    if len(set(pieces)) != len(pieces):
        raise ValueError(f"{model_dir}: the tokenizer has repeated pieces, so CTranslate2 tokens "
                         "cannot map back to ids")
    return pieces


def _check_destination(out_dir: Path, model_dir: Path) -> None:
    """Refuse to replace a non-empty directory that is not an earlier export, or the model directory."""
    check_replaceable(out_dir, lambda d: (d / MANIFEST).is_file(), "an export directory", [model_dir])


def _manifest(model_dir: Path, model, quantization: str, info: dict, decode, ct2_version: str) -> dict:
    c = model.config
    return {
        "format": "ctranslate2", "version": MANIFEST_VERSION, "source": str(model_dir.resolve()),
        "quantization": quantization, "aiayn_version": __version__, "ctranslate2_version": ct2_version,
        "positions": _table_rows(c),  # rows of the position tables: longer outputs end there
        "max_input_length": model.max_input_length,  # longer sources are cut here, as the native Translator cuts
        "model": {"n_encoder_layers": c.n_encoder_layers, "n_decoder_layers": c.n_decoder_layers,
                  "d_model": c.d_model, "n_heads": c.n_heads, "norm_first": c.norm_first,
                  "src_vocab_size": c.src_vocab_size, "tgt_vocab_size": c.tgt_vocab_size},
        "task": info.get("task", DEFAULT_TASK), "languages": info.get("languages"),
        "decode": dataclasses.asdict(decode),  # the defaults a translator starts from
        "task_info": info,  # task.json, also copied beside this file
    }


def _write_extras(directory: Path, tokenizers, info: dict, manifest: dict) -> None:
    save_tokenizers(tokenizers, directory)
    if info:
        write_task_info(directory, info)
    with atomic_write(directory / MANIFEST) as tmp:  # last: a directory with a manifest is complete
        tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


# -- the conversion ----------------------------------------------------------------------------------
def convert_transformer(model, out_dir: str | Path, quantization: str | None,
                        src_vocab: Sequence[str], tgt_vocab: Sequence[str]) -> Path:
    """Write CTranslate2's files for the `aiayn.models.Transformer` `model` into `out_dir`.

    `src_vocab`/`tgt_vocab`: the token string of every id. The position tables get `_table_rows`
    rows (the learned table's size, or max_positions + 256 for sinusoids, so that an output may
    run past the longest source), as the manifest says. `quantization` None keeps float32.
    """
    spec = transformer_spec(model)
    spec.register_source_vocabulary(list(src_vocab))
    spec.register_target_vocabulary(list(tgt_vocab))
    spec.validate()
    spec.optimize(quantization=quantization)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    return out_dir


def transformer_spec(model):
    """A CTranslate2 `TransformerSpec` holding the weights of `model` (float32 numpy copies)."""
    import numpy as np
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as ts

    c = model.config
    if c.universal:
        raise ValueError("CTranslate2 has no Universal Transformer (one layer applied again and again in depth): "
                         "this model cannot be exported")
    activation = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH"}[c.activation]
    spec = ts.TransformerSpec.from_config((c.n_encoder_layers, c.n_decoder_layers), c.n_heads,
                                          pre_norm=c.norm_first, activation=getattr(common_spec.Activation, activation))
    spec.config.layer_norm_epsilon = c.layer_norm_eps
    spec.config.add_source_eos = True  # aiayn's sources end with EOS
    rows = _table_rows(c)
    for side, stack in ((spec.encoder, model.encoder), (spec.decoder, model.decoder)):
        _stack(side, stack, rows, c.attention_score)
    out = model.output_proj.weight if model.output_proj is not None else model.decoder.embed.weight
    spec.decoder.projection.weight = _array(out)  # (V_tgt, D)
    bias = model.logits_bias
    spec.decoder.projection.bias = np.zeros(c.tgt_vocab_size, dtype=np.float32) if bias is None else _array(bias)
    return spec


def _table_rows(config) -> int:
    return config.max_positions if config.positional == "learned" else config.max_positions + 256


def _stack(side, stack, rows: int, attention_score: str) -> None:
    """One encoder or decoder stack: embeddings, positions, layers and (pre-norm) its final norm."""
    embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
    embeddings.weight = _array(stack.embed.weight)
    side.scale_embeddings = stack.embed.scale != 1.0
    side.position_encodings.encodings = _array(stack.positions(rows))  # (rows, D): each stack's own table
    if stack.final_norm is not None:
        _norm(side.layer_norm, stack.final_norm)
    for layer_spec, layer in zip(side.layer, stack.layers):
        _attention(layer_spec.self_attention, layer.self_attn, attention_score, fused=True)
        _norm(layer_spec.self_attention.layer_norm, layer.sa_conn.norm)
        if getattr(layer, "cross_attn", None) is not None:
            _attention(layer_spec.attention, layer.cross_attn, attention_score, fused=False)
            _norm(layer_spec.attention.layer_norm, layer.ca_conn.norm)
        _linear(layer_spec.ffn.linear_0, layer.ff.linear1.weight, layer.ff.linear1.bias)
        _linear(layer_spec.ffn.linear_1, layer.ff.linear2.weight, layer.ff.linear2.bias)
        _norm(layer_spec.ffn.layer_norm, layer.ff_conn.norm)


def _attention(spec, mha, attention_score: str, fused: bool) -> None:
    """Our in_proj (3D, D) is [W^Q; W^K; W^V]: CTranslate2 takes it whole for self-attention, and
    as the query (D, D) then the fused keys+values (2D, D) for encoder-decoder attention."""
    import numpy as np

    D = mha.d_model
    w, b = mha.in_proj.weight, mha.in_proj.bias
    if fused:
        _linear(spec.linear[0], w, b)
    else:
        _linear(spec.linear[0], w[:D], b[:D])
        _linear(spec.linear[1], w[D:], b[D:])
    _linear(spec.linear[-1], mha.out_proj.weight, mha.out_proj.bias)
    if attention_score == "dot":  # no 1/sqrt(Dh) (CTranslate2 scales queries by default)
        spec.queries_scale = np.float32(1.0)


def _linear(spec, weight, bias) -> None:
    spec.weight, spec.bias = _array(weight), _array(bias)


def _norm(spec, norm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _array(tensor) -> Any:
    return tensor.detach().float().cpu().numpy().copy()
