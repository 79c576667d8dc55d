"""GPT-2 <-> aiayn's decoder-only model: logits, the round trip, the tokenizer, generation."""

from __future__ import annotations

import torch

from hf_checkpoints import assert_logits_close, assert_same_tensors, lines
from aiayn.data.tokenizer import load_tokenizers
from aiayn.interop import export_hf
from aiayn.models import load_model

TEXTS = ["First Citizen: Before we proceed any further, hear me speak.", "All: Speak, speak. You are all resolved"]


def _hf(directory):
    from transformers import AutoTokenizer, GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained(directory).eval(), AutoTokenizer.from_pretrained(directory)


def _compare(hf, tok, ours) -> None:
    model, toks = load_model(ours), load_tokenizers(ours)
    ids = tok(TEXTS[0])["input_ids"]
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits
        mine = model(torch.tensor([toks.src.ids.to_aiayn(ids)]))[..., list(toks.src.ids.aiayn_of)]
    assert_logits_close(mine, theirs)


def test_import_gives_gpt2s_logits(gpt2_dirs):
    hf_dir, ours = gpt2_dirs
    _compare(*_hf(hf_dir), ours)
    assert load_model(ours).config.activation == "gelu_tanh"


def test_export_gives_aiayns_logits_and_round_trip_tensors(gpt2_dirs, tmp_path):
    hf_dir, ours = gpt2_dirs
    out = export_hf(ours, tmp_path / "back")
    assert_same_tensors(hf_dir, out)
    _compare(*_hf(out), ours)


def test_tokenizer_ids_equal_gpt2s_on_1000_lines(gpt2_dirs):
    hf_dir, ours = gpt2_dirs
    _, tok = _hf(hf_dir)
    side = load_tokenizers(ours).src
    texts = [t for t in lines("tinyshakespeare/input.txt.gz", 1400, skip=1000) if t][:1000]
    theirs = tok(texts)["input_ids"]
    assert [side.hf_ids(side.encode(t)) for t in texts] == theirs
    assert [side.decode(side.encode(t)) for t in texts] == tok.batch_decode(theirs, skip_special_tokens=True)


def test_generate_greedy_equals_transformers(gpt2_dirs):
    """The lm door (`load_pipeline`, as `aiayn generate` uses it) continues a prompt as GPT-2's greedy
    generate does: absent ids never win, <|endoftext|> ends both."""
    import aiayn

    hf_dir, ours = gpt2_dirs
    hf, tok = _hf(hf_dir)
    prompt = TEXTS[1]
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = hf.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=tok.eos_token_id)
    theirs = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert aiayn.load_pipeline(ours)([prompt], method="greedy", max_new_tokens=12) == [theirs]


def test_a_bare_gpt2model_imports_with_its_embedding_as_the_head(gpt2_dirs, tmp_path):
    """GPT2Model has no lm_head: transformers ties GPT2LMHeadModel's to the embedding, and so does the import."""
    import shutil

    from aiayn.interop import import_hf

    hf_dir, _ = gpt2_dirs
    hf, tok = _hf(hf_dir)
    hf.transformer.save_pretrained(tmp_path / "body")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(hf_dir / name, tmp_path / "body" / name)
    _compare(hf, tok, import_hf(tmp_path / "body", tmp_path / "ours"))
