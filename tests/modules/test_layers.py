"""Our layers against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer with copied weights."""

import pytest
import torch
from torch import nn

from aiayn.modules import masks
from aiayn.modules.cache import KVCache
from aiayn.config import TransformerConfig
from aiayn.modules.layers import DecoderLayer, EncoderLayer

CFG = dict(src_vocab_size=20, d_model=16, n_heads=4, d_ff=32)


def copy_attention(ours, ref: nn.MultiheadAttention):
    ref.in_proj_weight.copy_(ours.in_proj.weight)
    ref.in_proj_bias.copy_(ours.in_proj.bias)
    ref.out_proj.weight.copy_(ours.out_proj.weight)
    ref.out_proj.bias.copy_(ours.out_proj.bias)


def copy_common(ours, ref, norms):
    copy_attention(ours.self_attn, ref.self_attn)
    for name in ("linear1", "linear2"):
        getattr(ref, name).load_state_dict(getattr(ours.ff, name).state_dict())
    for ref_norm, conn in zip(norms, ("sa_conn", "ca_conn", "ff_conn") if len(norms) == 3 else ("sa_conn", "ff_conn")):
        ref_norm.load_state_dict(getattr(ours, conn).norm.state_dict())


def randomise_norms(module):
    for m in module.modules():
        if isinstance(m, nn.LayerNorm):
            nn.init.normal_(m.weight, 1.0, 0.1)
            nn.init.normal_(m.bias, 0.0, 0.1)


@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_encoder_layer_matches_torch(norm_first):
    cfg = TransformerConfig(**CFG, norm_first=norm_first)
    ours = EncoderLayer(cfg).eval()
    randomise_norms(ours)
    ref = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_common(ours, ref, [ref.norm1, ref.norm2])
    x = torch.randn(3, 5, 16)
    keep = torch.tensor([[1] * 5, [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    out, _ = ours(x, masks.key_mask(keep))
    expected = ref(x, src_key_padding_mask=~keep)
    # torch's fast path returns zeros at padded positions; compare real positions only
    torch.testing.assert_close(out[keep], expected[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_decoder_layer_matches_torch(norm_first):
    cfg = TransformerConfig(**CFG, norm_first=norm_first)
    ours = DecoderLayer(cfg, index=0).eval()
    randomise_norms(ours)
    ref = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_common(ours, ref, [ref.norm1, ref.norm2, ref.norm3])
    copy_attention(ours.cross_attn, ref.multihead_attn)
    x, memory = torch.randn(2, 6, 16), torch.randn(2, 4, 16)
    src_keep = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    cache = KVCache([ours.cross_attn.project_kv(memory)], src_keep)
    out, _, _ = ours(x, cache, masks.key_mask(src_keep))
    expected = ref(x, memory, tgt_mask=~masks.causal_mask(6), memory_key_padding_mask=~src_keep)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
