"""Marian (`MarianMTModel`, the opus-mt models) <-> aiayn's encoder-decoder, a translation model.

Marian is the paper's architecture: post-norm, sinusoidal positions, shared embeddings tied to the
output. What differs is an option each: the FFN's activation (opus-mt: swish, `activation =
"silu"`), the logits bias (`final_logits_bias`, `logits_bias`), the sinusoids in two halves
[sin | cos] (`sinusoid_layout = "halves"`), embeddings scaled by sqrt(d_model) or not
(`scale_embedding`), and separate source and target vocabularies (`share_encoder_decoder_embeddings`).

Ids (`interop.vocab`): eos -> EOS, unk -> UNK, pad -> BOS, since Marian starts decoding from its pad
token; aiayn's PAD is absent (a zero row, logit `ABSENT_LOGIT`), so the model has V + 1 ids and
its log-probabilities over the rest are Marian's. Sources end with eos in both.

Export writes what `MarianMTModel.from_pretrained` and `MarianTokenizer.from_pretrained` read. An
aiayn model trained with interleaved sinusoids (the paper's layout) exports too: the residual
stream's dimensions are permuted (`residual_permutation`) so that its sinusoids are Marian's halves;
every weight that reads or writes the stream is permuted alike, so the function is the same.
Decoding settings: an import takes generation_config.json's beam size, length penalty (as aiayn's
"plain" form |Y|^α, what Hugging Face's is), `no_repeat_ngram_size` and `min_new_tokens` (aiayn's
`min_len`); an export writes those back from task.json, greedy search as one beam and sampling as
`do_sample` (top-k off, as aiayn's default), and Marian's pad is never generated (`bad_words_ids`).
What has no Hugging Face counterpart is named in a warning: the GNMT penalty and n-best lists.
aiayn's length limit a·|src| + b has none either: `max_length` is the position table's. Generate's
default early stopping (False) is a heuristic that aiayn's exact search does not copy.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import torch
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID, UNK_ID, ConfigError, DecodeConfig, TransformerConfig
from aiayn.data.tokenizer import MANIFEST, SentencePieceTokenizer, TokenizerPair
from aiayn.interop.checkpoint import (ACTIVATIONS_OUT, Checkpoint, Exported, Imported, Param, Unsupported,
                                      activation_in, attention, dump_params, json_file, linear,
                                      refuse_options)
from aiayn.interop.tokenizers import MarianTokenizer
from aiayn.interop.vocab import IdMap
from aiayn.io import read_json_object
from aiayn.model_dir import decode_settings
from aiayn.models.transformer import Transformer
from aiayn.tasks.translation import TranslationTask

ARCHITECTURE = "MarianMTModel"
LAYER_NORM_EPS = 1e-5  # Marian's nn.LayerNorm default
HF_LENGTH_PENALTY = 1.0  # generate's default α
HF_NUM_BEAMS = 1  # generate's default: greedy

log = logging.getLogger(__name__)


# -- the weight table ------------------------------------------------------------------------------
def params(cfg: TransformerConfig, src: IdMap, tgt: IdMap) -> list[Param]:
    shared = cfg.share_embeddings
    enc_embed = "model.shared.weight" if shared else "model.encoder.embed_tokens.weight"
    dec_embed = "model.shared.weight" if shared else "model.decoder.embed_tokens.weight"
    table = [_rows("encoder.embed.weight", enc_embed, src), _rows("decoder.embed.weight", dec_embed, tgt)]
    if not cfg.tie_output:
        table.append(_rows("output_proj.weight", "lm_head.weight", tgt))
    if cfg.logits_bias:
        table.append(Param("logits_bias", ("final_logits_bias",), lambda ts: tgt.bias_in(ts[0].reshape(-1), ts[0]),
                           lambda t: [tgt.rows_out(t)[None]]))
    for i in range(cfg.n_encoder_layers):
        a, h = f"encoder.layers.{i}", f"model.encoder.layers.{i}"
        table += _attention(f"{a}.self_attn", f"{h}.self_attn") + linear(f"{a}.sa_conn.norm", f"{h}.self_attn_layer_norm")
        table += _ffn(a, h)
    for i in range(cfg.n_decoder_layers):
        a, h = f"decoder.layers.{i}", f"model.decoder.layers.{i}"
        table += _attention(f"{a}.self_attn", f"{h}.self_attn") + linear(f"{a}.sa_conn.norm", f"{h}.self_attn_layer_norm")
        table += _attention(f"{a}.cross_attn", f"{h}.encoder_attn")
        table += linear(f"{a}.ca_conn.norm", f"{h}.encoder_attn_layer_norm") + _ffn(a, h)
    return table


def _rows(aiayn: str, hf: str, ids: IdMap) -> Param:
    return Param(aiayn, (hf,), lambda ts: ids.rows_in(ts[0]), lambda t: [ids.rows_out(t)])


def _attention(aiayn: str, hf: str) -> list[Param]:
    return attention(aiayn, f"{hf}.q_proj", f"{hf}.k_proj", f"{hf}.v_proj", f"{hf}.out_proj")


def _ffn(aiayn: str, hf: str) -> list[Param]:
    return (linear(f"{aiayn}.ff.linear1", f"{hf}.fc1") + linear(f"{aiayn}.ff.linear2", f"{hf}.fc2")
            + linear(f"{aiayn}.ff_conn.norm", f"{hf}.final_layer_norm"))


# -- import ----------------------------------------------------------------------------------------
def import_checkpoint(ckpt: Checkpoint) -> Imported:
    c = ckpt.field
    ckpt.check_architecture(ARCHITECTURE)
    heads, d_ff = ckpt.need("encoder_attention_heads"), ckpt.need("encoder_ffn_dim")
    pad = ckpt.token_id("pad_token_id")
    for field, value, want, why in (
            ("decoder_attention_heads", c("decoder_attention_heads"), heads, "encoder_attention_heads"),
            ("decoder_ffn_dim", c("decoder_ffn_dim"), d_ff, "encoder_ffn_dim"),
            ("decoder_start_token_id", c("decoder_start_token_id"), pad, "pad_token_id")):
        if value != want:
            raise ckpt.refuse(field, value, f"aiayn's model has one value for both, so it must equal {why} = {want!r}")
    for field in ("normalize_before", "add_final_layer_norm", "normalize_embedding", "layernorm_embedding"):
        if c(field):  # BART-family options an old Marian config may carry
            raise ckpt.refuse(field, c(field), "Marian is post-norm without embedding norms")
    tokenizers, src, tgt = _import_tokenizers(ckpt)
    config = TransformerConfig(
        src_vocab_size=src.size, tgt_vocab_size=tgt.size, d_model=ckpt.need("d_model"), n_heads=heads,
        n_encoder_layers=ckpt.need("encoder_layers"), n_decoder_layers=ckpt.need("decoder_layers"), d_ff=d_ff,
        dropout=c("dropout", 0.1), attention_dropout=c("attention_dropout", 0.0),
        activation_dropout=c("activation_dropout", 0.0), max_positions=c("max_position_embeddings", 1024),  # MarianConfig's
        share_embeddings=c("share_encoder_decoder_embeddings", True) and not _embeddings_apart(ckpt),
        tie_output=c("tie_word_embeddings", True),
        layer_norm_eps=LAYER_NORM_EPS, activation=activation_in(ckpt, "activation_function", "gelu"),
        logits_bias=True, sinusoid_layout="halves", scale_embeddings=bool(c("scale_embedding", False)))
    # apart, transformers computes with each side's embed_tokens, and model.shared is a matrix it does not use
    ignored = () if config.share_embeddings else ("model.shared.weight",)
    return Imported(Transformer.model_type, config, params(config, src, tgt), tokenizers, _task_info(ckpt, config),
                    ignored)


SIDE_EMBEDDINGS = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")


def _embeddings_apart(ckpt: Checkpoint) -> bool:
    """Whether the encoder's and decoder's embeddings are matrices of their own, whatever
    share_encoder_decoder_embeddings says: transformers 5 keeps them apart from model.shared when
    tie_word_embeddings is false, and computes with them."""
    if not all(ckpt.has(name) for name in SIDE_EMBEDDINGS) or not ckpt.has("model.shared.weight"):
        return False
    shared = ckpt.tensor("model.shared.weight")
    return not all(torch.equal(ckpt.tensor(name), shared) for name in SIDE_EMBEDDINGS)


def _import_tokenizers(ckpt: Checkpoint) -> tuple[TokenizerPair, IdMap, IdMap]:
    d = ckpt.directory
    settings = read_json_object(d / "tokenizer_config.json", missing_ok=True)
    separate = bool(settings.get("separate_vocabs", False))
    vocab = read_json_object(d / "vocab.json")
    tgt_vocab = read_json_object(d / "target_vocab.json") if separate else vocab
    pad, eos = ckpt.token_id("pad_token_id"), ckpt.token_id("eos_token_id")
    V = ckpt.need("vocab_size")
    sides = []
    for spm, words, size in (("source.spm", vocab, V), ("target.spm", tgt_vocab, ckpt.field("decoder_vocab_size") or V)):
        if "<unk>" not in words:
            raise Unsupported(f"{d}: the vocabulary of {spm} has no '<unk>'")
        ids = IdMap.build(size, {eos: EOS_ID, words["<unk>"]: UNK_ID, pad: BOS_ID})
        path = d / spm
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found (a Marian directory holds source.spm and target.spm)")
        sides.append((MarianTokenizer(path.read_bytes(), words, ids, source=str(path)), ids))
    (src_tok, src), (tgt_tok, tgt) = sides
    return TokenizerPair(src_tok, tgt_tok), src, tgt


def _task_info(ckpt: Checkpoint, config: TransformerConfig) -> dict:
    """task.json: a translation model, its language pair when the directory says it (tokenizer_config's
    source_lang/target_lang, else a name like opus-mt-de-en), the beam and length penalty of
    generation_config.json (Hugging Face's |Y|^α: the "plain" form; without num_beams, greedy, as
    Hugging Face decodes then), aiayn's maximum length (|src| + 50); sources cut at the position
    table's length."""
    import dataclasses

    d = ckpt.directory
    settings = read_json_object(d / "tokenizer_config.json", missing_ok=True)
    generation = read_json_object(d / "generation_config.json", missing_ok=True)
    generation = {**ckpt.config, **generation}  # older opus-mt configs hold num_beams in config.json
    pair = [settings.get("source_lang"), settings.get("target_lang")]
    if not all(isinstance(x, str) and x for x in pair):
        found = re.search(r"opus-mt-([a-z]{2,3})-([a-z]{2,3})$", d.resolve().name)
        pair = list(found.groups()) if found else None
    try:
        decode = DecodeConfig(beam_size=generation.get("num_beams", HF_NUM_BEAMS),
                              length_penalty=generation.get("length_penalty", HF_LENGTH_PENALTY),
                              length_penalty_form="plain", min_len=generation.get("min_new_tokens") or 0,
                              no_repeat_ngram_size=generation.get("no_repeat_ngram_size") or 0)
    except ConfigError as e:
        raise Unsupported(f"{d / 'generation_config.json'} (or config.json): {e}") from None
    info = {"task": TranslationTask.name, "decode": dataclasses.asdict(decode), "keep": "start",
            "max_input_tokens": config.max_positions, "imported_from": {"format": "hf", "architecture": ARCHITECTURE},
            **_multilingual(ckpt)}
    return {**info, "languages": pair} if pair else info


def _multilingual(ckpt: Checkpoint) -> dict:
    """A multilingual model's target tag and directions, as an aiayn export writes them into config.json
    (`MULTILINGUAL_PREFIX`; transformers keeps such fields through its own saves)."""
    tag, directions = (ckpt.field(f"{MULTILINGUAL_PREFIX}{k}") for k in MULTILINGUAL)
    if tag is None and directions is None:
        return {}
    pairs_ok = isinstance(directions, list) and directions and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) and x for x in p) for p in directions)
    if not (isinstance(tag, str) and "{}" in tag and " " not in tag and pairs_ok):
        raise ckpt.refuse(f"{MULTILINGUAL_PREFIX}target_tag and {MULTILINGUAL_PREFIX}directions", [tag, directions],
                          "a tag holding {} and no space, and a list of [source, target] pairs")
    return {"target_tag": tag, "directions": directions}


# -- export ----------------------------------------------------------------------------------------
def exports(model) -> bool:
    """Whether `export_model` maps `model`: the encoder-decoder."""
    return model.model_type == Transformer.model_type


# task.json's fields of a multilingual model (`tasks.multilingual`), kept in config.json under this prefix
MULTILINGUAL, MULTILINGUAL_PREFIX = ("target_tag", "directions"), "aiayn_"


def export_model(model, tokenizers: TokenizerPair, info: dict, where: str) -> Exported:
    cfg: TransformerConfig = model.config
    refuse_options(where, "Marian", {
        "copy_attention": (cfg.copy_attention, False), "source_positions": (cfg.source_positions, "start"),
        "source_units": (cfg.source_units, "tokens"),
        "norm_first": (cfg.norm_first, False), "positional": (cfg.positional, "sinusoidal"),
        "attention_score": (cfg.attention_score, "scaled_dot"), "layer_norm_eps": (cfg.layer_norm_eps, LAYER_NORM_EPS)})
    src, tgt, files = _export_tokenizers(tokenizers, cfg, where, info)
    pad, eos = src.inverse[BOS_ID], src.inverse[EOS_ID]
    if not cfg.share_embeddings and (tgt.inverse[BOS_ID], tgt.inverse[EOS_ID]) != (pad, eos):
        raise Unsupported(f"{where}: the target vocabulary's pad and eos ids differ from the source's; "
                          "Marian has one of each")
    state = model.state_dict()
    if cfg.sinusoid_layout == "interleaved":
        state = permute_residual(state, residual_permutation(cfg.d_model))
    tensors = dump_params(state, params(cfg, src, tgt))
    if cfg.share_embeddings and not cfg.tie_output:  # the sides' own names too: transformers 5 reads them then
        tensors.update({name: tensors["model.shared.weight"].clone() for name in SIDE_EMBEDDINGS})
    if not cfg.logits_bias:
        tensors["final_logits_bias"] = torch.zeros(1, tgt.hf_size)
    config = {
        "model_type": "marian", "architectures": [ARCHITECTURE], "vocab_size": src.hf_size,
        "decoder_vocab_size": tgt.hf_size, "d_model": cfg.d_model, "encoder_layers": cfg.n_encoder_layers,
        "decoder_layers": cfg.n_decoder_layers, "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads, "encoder_ffn_dim": cfg.d_ff, "decoder_ffn_dim": cfg.d_ff,
        "activation_function": ACTIVATIONS_OUT[cfg.activation], "max_position_embeddings": cfg.max_positions,
        "scale_embedding": cfg.scale_embeddings, "share_encoder_decoder_embeddings": cfg.share_embeddings,
        "tie_word_embeddings": cfg.tie_output, "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout, "pad_token_id": pad, "decoder_start_token_id": pad,
        "eos_token_id": eos, "forced_eos_token_id": eos, "is_encoder_decoder": True,
        **{f"{MULTILINGUAL_PREFIX}{k}": info[k] for k in MULTILINGUAL if k in info}}
    files["generation_config.json"] = json_file({
        "decoder_start_token_id": pad, "pad_token_id": pad, "eos_token_id": eos, "forced_eos_token_id": eos,
        "bad_words_ids": [[pad]], "max_length": cfg.max_positions, **_generation(decode_settings(info, where), where)})
    return Exported(config, tensors, files)


def _generation(decode: DecodeConfig, where: str) -> dict:
    """generation_config.json's search settings for task.json's `decode`; what Hugging Face cannot say is
    named in a warning."""
    out = {"num_beams": 1 if decode.method != "beam" else decode.beam_size}
    if decode.method == "sample":
        out.update(do_sample=True, top_k=0)  # Hugging Face's top_k default is 50; aiayn's keeps every token
    if decode.length_penalty_form == "plain":
        out["length_penalty"] = decode.length_penalty
    if decode.no_repeat_ngram_size:
        out["no_repeat_ngram_size"] = decode.no_repeat_ngram_size
    if decode.min_len:
        out["min_new_tokens"] = decode.min_len
    lost = []
    if decode.length_penalty_form != "plain":
        lost.append(f"the GNMT length penalty (α {decode.length_penalty}; Hugging Face's |Y|^α applies)")
    if decode.nbest > 1:
        lost.append(f"nbest {decode.nbest}")
    if lost:
        log.warning("%s: no Hugging Face counterpart, left out of generation_config.json: %s", where, "; ".join(lost))
    return out


def _export_tokenizers(tokenizers: TokenizerPair | None, cfg: TransformerConfig, where: str, info: dict):
    """(source id map, target id map, files): Marian's source.spm, target.spm, vocab.json (and
    target_vocab.json for separate vocabularies) and tokenizer_config.json."""
    if tokenizers is None:
        raise Unsupported(f"{Path(where) / MANIFEST}: not found; a Marian export needs the model's tokenizer")
    sides = []
    for tok, size in ((tokenizers.src, cfg.src_vocab_size), (tokenizers.tgt, cfg.tgt_vocab_size)):
        if isinstance(tok, MarianTokenizer):
            sides.append((tok.spm, tok.vocab, tok.ids))
        elif isinstance(tok, SentencePieceTokenizer):  # aiayn's own: eos 0, unk 1, the pieces, pad last
            ids = IdMap.build(size - 1, {0: EOS_ID, 1: UNK_ID, size - 2: BOS_ID})
            pieces = tok.pieces(range(size))
            vocab = {pieces[a]: h for h, a in enumerate(ids.aiayn_of)}
            vocab.update({"</s>": 0, "<unk>": 1, "<pad>": size - 2})
            sides.append((tok.serialize(), vocab, ids))
        else:
            raise Unsupported(f"{where}: a {tok.kind} tokenizer has no Marian counterpart (sentencepiece has)")
    (src_spm, src_vocab, src), (tgt_spm, tgt_vocab, tgt) = sides
    separate = not tokenizers.joint and src_vocab != tgt_vocab
    languages = info.get("languages") or [None, None]
    files = {"source.spm": src_spm, "target.spm": tgt_spm, "vocab.json": json_file(src_vocab),
             "tokenizer_config.json": json_file({
                 "tokenizer_class": "MarianTokenizer", "source_lang": languages[0], "target_lang": languages[1],
                 "separate_vocabs": separate, "unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>",
                 "model_max_length": cfg.max_positions})}
    if separate:
        files["target_vocab.json"] = json_file(tgt_vocab)
    return src, tgt, files


def residual_permutation(d_model: int) -> Tensor:
    """perm with interleaved[:, perm] == halves: the even dimensions (the sines), then the odd."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


_READS = ("embed.weight", "output_proj.weight", "in_proj.weight", "linear1.weight")  # (out, D): columns
_WRITES = ("out_proj.weight", "linear2.weight", "out_proj.bias", "linear2.bias", "norm.weight", "norm.bias")  # rows


def permute_residual(state: dict[str, Tensor], perm: Tensor) -> dict[str, Tensor]:
    """The encoder-decoder's state with the residual stream's dimensions reordered by `perm`: the same
    function, its hidden states permuted (and its sinusoids with them)."""
    out = {}
    for name, t in state.items():
        if name.endswith(_READS):
            t = t[:, perm]
        elif name.endswith(_WRITES):  # (D, in) or (D,)
            t = t[perm]
        out[name] = t
    return out
