"""GPT-2 (`GPT2LMHeadModel`, or the bare `GPT2Model`, whose head is its tied embedding as in
transformers) <-> aiayn's decoder-only model, a language model (task lm).

GPT-2 is the decoder-only model with pre-norm, learned positions, unscaled embeddings tied to the
output and the tanh GELU (`activation = "gelu_tanh"`); its Conv1D layers store (in, out) weights,
our linear maps (out, in). Ids (`interop.vocab`): <|endoftext|> -> EOS, the rest from 4 on;
aiayn's PAD, BOS and UNK are absent (zero rows, logit `ABSENT_LOGIT`, `logits_bias = True`), so
the model has V + 3 ids and the same log-probabilities over GPT-2's. The tokenizer is GPT-2's
byte-level BPE (tokenizer.json, the `tokenizers` library).
"""

from __future__ import annotations

import torch

from aiayn.config import BOS_ID, EOS_ID
from aiayn.data.tokenizer import TokenizerPair
from aiayn.interop.bert import read_tokenizer_json
from aiayn.interop.checkpoint import (ACTIVATIONS_OUT, Checkpoint, Exported, Imported, Param, Unsupported,
                                      activation_in, dump_params, json_file, linear, refuse_options, same, transposed)
from aiayn.interop.tokenizers import HFTokenizer
from aiayn.interop.vocab import IdMap
from aiayn.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from aiayn.tasks.lm import LMTask

ARCHITECTURE, BODY = "GPT2LMHeadModel", "GPT2Model"


def params(cfg: DecoderOnlyConfig, ids: IdMap) -> list[Param]:
    table = [Param("embed.weight", ("transformer.wte.weight",), lambda ts: ids.rows_in(ts[0]),
                   lambda t: [ids.rows_out(t)]),
             same("positions.weight", "transformer.wpe.weight"),
             *linear("final_norm", "transformer.ln_f")]
    if cfg.logits_bias:  # an import's: only the absent ids' ABSENT_LOGIT
        table.append(Param("logits_bias", (), lambda ts: ids.bias_in(None, torch.zeros(())), lambda t: []))
    for i in range(cfg.n_layers):
        a, h = f"layers.{i}", f"transformer.h.{i}"
        table += linear(f"{a}.self_attn.in_proj", f"{h}.attn.c_attn", transposed)
        table += linear(f"{a}.self_attn.out_proj", f"{h}.attn.c_proj", transposed)
        table += linear(f"{a}.sa_conn.norm", f"{h}.ln_1") + linear(f"{a}.ff_conn.norm", f"{h}.ln_2")
        table += linear(f"{a}.ff.linear1", f"{h}.mlp.c_fc", transposed)
        table += linear(f"{a}.ff.linear2", f"{h}.mlp.c_proj", transposed)
    return table


def import_checkpoint(ckpt: Checkpoint) -> Imported:
    c = ckpt.field
    architecture = ckpt.check_architecture(ARCHITECTURE, BODY)  # a bare body: its head is the tied embedding
    for field, value, want in (("scale_attn_by_inverse_layer_idx", c("scale_attn_by_inverse_layer_idx", False), False),
                               ("scale_attn_weights", c("scale_attn_weights", True), True),
                               ("add_cross_attention", c("add_cross_attention", False), False),
                               ("tie_word_embeddings", c("tie_word_embeddings", True), True)):
        if value != want:
            raise ckpt.refuse(field, value, f"aiayn's decoder-only model has {want!r}")
    tokenizer = _import_tokenizer(ckpt)
    d_model = c("n_embd", 768)
    config = DecoderOnlyConfig(
        vocab_size=tokenizer.ids.size, d_model=d_model, n_heads=c("n_head", 12), n_layers=c("n_layer", 12),
        d_ff=c("n_inner") or 4 * d_model, dropout=c("resid_pdrop", 0.1), attention_dropout=c("attn_pdrop", 0.1),
        norm_first=True, positional="learned", max_positions=c("n_positions", 1024), tie_output=True,
        scale_embeddings=False, layer_norm_eps=c("layer_norm_epsilon", 1e-5),
        activation=activation_in(ckpt, "activation_function", "gelu_new"), logits_bias=True)

    info = {"task": LMTask.name, "block": config.max_positions,
            "imported_from": {"format": "hf", "architecture": architecture}}
    return Imported(DecoderOnly.model_type, config, params(config, tokenizer.ids), TokenizerPair.shared(tokenizer), info)


def _import_tokenizer(ckpt: Checkpoint) -> HFTokenizer:
    eos, bos = ckpt.field("eos_token_id", 50256), ckpt.field("bos_token_id", 50256)
    specials = {eos: EOS_ID} if bos in (None, eos) else {eos: EOS_ID, bos: BOS_ID}
    ids = IdMap.build(ckpt.field("vocab_size", 50257), specials)
    return HFTokenizer(read_tokenizer_json(ckpt), ids, str(ckpt.directory / "tokenizer.json"))


def exports(model) -> bool:
    """Whether `export_model` maps `model`: a decoder-only language model."""
    return model.model_type == DecoderOnly.model_type


def export_model(model, tokenizers, info: dict, where: str) -> Exported:
    cfg: DecoderOnlyConfig = model.config
    refuse_options(where, "GPT-2", {
        "norm_first": (cfg.norm_first, True), "positional": (cfg.positional, "learned"),
        "scale_embeddings": (cfg.scale_embeddings, False), "tie_output": (cfg.tie_output, True),
        "attention_score": (cfg.attention_score, "scaled_dot")})
    tokenizer = HFTokenizer.of(tokenizers, where, "GPT-2")
    ids = tokenizer.ids
    if cfg.logits_bias and bool(ids.rows_out(model.logits_bias.detach()).ne(0).any()):
        raise Unsupported(f"{where}: logits_bias is not zero, and GPT-2 has no logits bias")
    eos = ids.inverse[EOS_ID]
    bos = ids.inverse.get(BOS_ID, eos)
    config = {"model_type": "gpt2", "architectures": [ARCHITECTURE], "vocab_size": ids.hf_size, "n_embd": cfg.d_model,
              "n_head": cfg.n_heads, "n_layer": cfg.n_layers, "n_inner": cfg.d_ff, "n_positions": cfg.max_positions,
              "activation_function": ACTIVATIONS_OUT[cfg.activation], "layer_norm_epsilon": cfg.layer_norm_eps,
              "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout, "attn_pdrop": cfg.attention_dropout,
              "bos_token_id": bos, "eos_token_id": eos, "tie_word_embeddings": True}
    files = {"tokenizer.json": tokenizer.json.encode("utf-8"),
             "tokenizer_config.json": json_file({"tokenizer_class": "GPT2Tokenizer", "model_max_length": cfg.max_positions})}
    return Exported(config, dump_params(model.state_dict(), params(cfg, ids)), files)
