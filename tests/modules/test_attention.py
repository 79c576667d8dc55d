import math
import pytest
import torch
from torch import nn

from aiayn.modules import attention, masks
from aiayn.modules.attention import MultiHeadAttention, scaled_dot_product_attention

D, H = 16, 4


def pair(device="cpu"):
    ours = MultiHeadAttention(D, H).eval().to(device)
    ref = nn.MultiheadAttention(D, H, batch_first=True).eval().to(device)
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.in_proj_bias.copy_(ours.in_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ours, ref


@pytest.mark.parametrize("need_weights", [False, True])
def test_self_attention_with_padding_matches_torch(need_weights, device):
    ours, ref = pair(device)
    x = torch.randn(3, 5, D, device=device)
    keep = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool, device=device)
    out, w = ours(x, mask=masks.key_mask(keep), need_weights=need_weights)
    expected, ref_w = ref(x, x, x, key_padding_mask=~keep, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
def test_causal_self_attention_matches_torch(need_weights, device):
    ours, ref = pair(device)
    x = torch.randn(2, 6, D, device=device)
    out, _ = ours(x, is_causal=True, need_weights=need_weights)
    expected, _ = ref(x, x, x, attn_mask=~masks.causal_mask(6, device=device))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_causal_and_padding_combined_match_torch(device):
    ours, ref = pair(device)
    x = torch.randn(2, 4, D, device=device)
    keep = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool, device=device)
    out, _ = ours(x, mask=masks.key_mask(keep), is_causal=True)
    expected, _ = ref(x, x, x, attn_mask=~masks.causal_mask(4, device=device), key_padding_mask=~keep)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_cross_attention_matches_torch():
    ours, ref = pair()
    q, mem = torch.randn(2, 3, D), torch.randn(2, 7, D)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[1, 4:] = False
    out, _ = ours(q, mem, mask=masks.key_mask(keep))
    expected, _ = ref(q, mem, mem, key_padding_mask=~keep)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_row_gives_zeros_not_nan(need_weights):
    q, k, v = (torch.randn(2, H, 3, 4, requires_grad=True) for _ in range(3))
    keep = torch.tensor([[True, True, False], [False, False, False]])  # second sequence: nothing to attend
    out, w = scaled_dot_product_attention(q, k, v, masks.key_mask(keep), need_weights=need_weights)
    assert not torch.isnan(out).any()
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    out.sum().backward()
    assert not any(torch.isnan(t.grad).any() for t in (q, k, v))
    if need_weights:
        assert torch.equal(w[1], torch.zeros_like(w[1]))


def test_weights_rows_sum_to_one_and_masked_keys_get_zero():
    q, k, v = (torch.randn(1, H, 3, 4) for _ in range(3))
    keep = torch.tensor([[True, True, False]])
    _, w = scaled_dot_product_attention(q, k, v, masks.key_mask(keep), need_weights=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, H, 3))
    assert torch.equal(w[..., 2], torch.zeros(1, H, 3))


def test_dot_and_additive_scores_against_hand_computed_weights():
    """§3.2.1's comparison: q = (1, 2), keys (1, 0) and (0, 1), one head."""
    from aiayn.modules.attention import additive_attention

    q = torch.tensor([[[[1.0, 2.0]]]])  # (B=1, H=1, Tq=1, Dh=2)
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])  # (1, 1, Tk=2, 2)
    v = torch.tensor([[[[10.0, 0.0], [0.0, 10.0]]]])
    softmax = lambda a, b: torch.softmax(torch.tensor([a, b]), 0)  # noqa: E731
    _, w = scaled_dot_product_attention(q, k, v, need_weights=True, scale=1.0)  # dot: scores 1, 2
    torch.testing.assert_close(w[0, 0, 0], softmax(1.0, 2.0))
    _, w = scaled_dot_product_attention(q, k, v, need_weights=True)  # scaled: 1/√2, 2/√2
    torch.testing.assert_close(w[0, 0, 0], softmax(1 / 2**0.5, 2 / 2**0.5))
    out, w = additive_attention(q, k, v, torch.tensor([[1.0, -1.0]]), need_weights=True)
    t = math.tanh  # wᵀ tanh(q + k): q + k = (2, 2) and (1, 3)
    expected = softmax(t(2) - t(2), t(1) - t(3))
    torch.testing.assert_close(w[0, 0, 0], expected)
    torch.testing.assert_close(out[0, 0, 0], 10 * expected)


def test_dot_score_takes_the_fused_path_with_the_same_result():
    q, k, v = (torch.randn(2, 2, 3, 4) for _ in range(3))
    mask = torch.tensor([[True, True, False], [True, False, False]])[:, None, None, :]
    fused, _ = scaled_dot_product_attention(q, k, v, mask, scale=1.0)
    explicit, _ = scaled_dot_product_attention(q, k, v, mask, need_weights=True, scale=1.0)
    torch.testing.assert_close(fused, explicit)


@pytest.mark.parametrize("is_causal", [False, True])
def test_bf16_training_on_cpu_takes_the_explicit_path_with_the_fused_result(is_causal, monkeypatch):
    """Where grads are wanted in bf16 on a CPU, the explicit matmuls replace torch's slow fused
    kernel: same output and gradients as the fp32 fused kernel, within bf16's precision."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, H, 5, D // H) for _ in range(3))
    keep = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    mask = masks.key_mask(keep)

    def run(dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        out, _ = scaled_dot_product_attention(*leaves, mask, is_causal=is_causal)
        (out.float() * torch.arange(out.numel()).view(out.shape).sin()).sum().backward()
        return [out.float()] + [t.grad.float() for t in leaves]

    fused = run(torch.float32)
    with monkeypatch.context() as m:  # bf16 with grads must not reach the fused kernel
        m.setattr(attention.F, "scaled_dot_product_attention", _refuse)
        explicit = run(torch.bfloat16)
    for low, high in zip(explicit, fused):
        torch.testing.assert_close(low, high, atol=0.05, rtol=0.05)


def _refuse(*args, **kwargs):
    raise AssertionError("the fused kernel was called")


def test_explicit_scores_are_scaled_before_the_product_so_fp16_does_not_overflow():
    """q·k = 64 · 40² = 102,400 overflows fp16 (max 65,504); q·k/√64 = 12,800 does not. The explicit
    path (need_weights; fp16 training on CUDA) scales q first, so its weights stay finite."""
    q = torch.full((1, 1, 2, 64), 40.0, dtype=torch.float16)
    k = torch.cat([q[:, :, :1], -q[:, :, :1]], dim=2)  # (1, 1, 2, 64): a key the queries agree with, one they oppose
    out, weights = scaled_dot_product_attention(q, k, k, need_weights=True)
    assert torch.isfinite(weights).all() and torch.isfinite(out).all()
    torch.testing.assert_close(weights[0, 0].float(), torch.tensor([[1.0, 0.0], [1.0, 0.0]]))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("is_causal", [False, True])
def test_both_paths_compute_the_papers_formula(fused, is_causal):
    """`scaled_dot_product_attention` (fused kernel, or explicit matmuls) against equation 1 as written."""
    q, k, v = (torch.randn(2, H, 5, D // H) for _ in range(3))
    keep = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    mask = masks.key_mask(keep)
    full = mask & masks.causal_mask(5) if is_causal else mask
    out, _ = scaled_dot_product_attention(q, k, v, mask, is_causal, need_weights=not fused)
    torch.testing.assert_close(out, attention.attention(q, k, v, full), atol=1e-5, rtol=1e-5)
