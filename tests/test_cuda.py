"""The CUDA paths, checked against the CPU ones. Skipped on machines without a GPU (CI has none);
run where one is lent (see ../shared/GPU.md)."""

import pytest
import torch

from aiayn.config import DecodeConfig, OptimConfig, TransformerConfig
from aiayn.decoding import beam_search, for_inference, greedy_search
from aiayn.models import Transformer
from aiayn.modules.attention import scaled_dot_product_attention
from aiayn.runtime import count_cuda_syncs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
V = 40


def tiny() -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig.preset("tiny", src_vocab_size=V)).eval()


def sources() -> torch.Tensor:
    src = torch.randint(4, V, (4, 9), generator=torch.Generator().manual_seed(1))
    src[:, -1] = 2
    src[1, 5:] = 0
    src[3, 3:] = 0
    return src


@torch.inference_mode()
def test_fast_step_on_cuda_equals_model_step():
    model, src = tiny().cuda(), sources().cuda()
    fast, ref_state, fast_state = model.fast_decoder(), model.start(src), model.start(src)
    tokens = torch.full((4,), 1, device="cuda")
    for _ in range(5):
        ref, got = model.step(tokens, ref_state), fast.step(tokens, fast_state)
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
        tokens = ref.argmax(-1)


def test_greedy_and_beam_on_cuda_match_cpu():
    model, src = tiny(), sources()
    cfg = DecodeConfig(beam_size=3, max_len_b=8)
    cpu_greedy, cpu_beam = greedy_search(model, src, 1.0, 8), [h[0].tokens for h in beam_search(model, src, cfg)]
    gpu = for_inference(model.cuda())
    assert greedy_search(gpu, src.cuda(), 1.0, 8) == cpu_greedy
    assert [h[0].tokens for h in beam_search(gpu, src.cuda(), cfg)] == cpu_beam


def test_beam_search_waits_for_the_gpu_once_a_step():
    """Every sentence runs to its length limit (EOS is banned before it), so a longer limit adds only
    steps where nothing finishes: each such step copies one summary back (`beam._summary`), nothing
    else. (The search once waited four times a step, and more where hypotheses finished.)"""
    gpu, src = for_inference(tiny().cuda()), sources().cuda()
    count = {n: count_cuda_syncs(lambda n=n: beam_search(gpu, src, DecodeConfig(max_len_a=0.0, max_len_b=n, min_len=n)))
             for n in (8, 16)}
    assert count[16] - count[8] == 8, count


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fully_masked_rows_are_zeros_not_nan_on_cuda(dtype):
    q, k, v = (torch.randn(2, 2, 3, 16, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    mask = torch.ones(2, 1, 1, 3, dtype=torch.bool, device="cuda")
    mask[1] = False  # the second sequence has no key at all
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and (out[1] == 0).all()
    out.float().sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_padding_masks_run_on_a_fused_kernel():
    """With the math fallback switched off, our padding masks still run: a fused kernel took them."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.randn(4, 8, 20, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(4, 1, 1, 20, dtype=torch.bool, device="cuda")
    mask[1, ..., 12:] = False
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
        fused, _ = scaled_dot_product_attention(q, k, v, mask)
    reference, _ = scaled_dot_product_attention(q.float(), k.float(), v.float(), mask, need_weights=True)
    torch.testing.assert_close(fused.float(), reference, atol=2e-2, rtol=2e-2)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # flash takes no mask: the causal, unpadded decoder path
        causal, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.isfinite(causal).all()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_training_steps_lower_the_loss(tmp_path, precision):
    from aiayn.training.config import RunConfig

    from training_helpers import batches, make_trainer, tiny_config

    model = Transformer(tiny_config(dropout=0.0)).cuda()
    data = batches(4, 8, seed=0)
    run = RunConfig(max_updates=60, precision=precision, progress=False, log_every=10, device="cuda")
    trainer = make_trainer(model, OptimConfig(warmup_steps=10, lr_factor=2.0), run, tmp_path, lambda e: data)
    first = trainer.update(data[:1]).loss
    trainer.fit()
    last = trainer.accumulate(data[:1]).loss
    assert last < 0.7 * first


def test_bf16_decoding_steps_without_cudnn_attention_and_restores_the_switch():
    """cuDNN's attention kernel plans every new shape, and each decoding step has one
    (`runtime.no_cudnn_attention`): the switch is off inside the fast decoder's bf16 start and steps only."""
    fast, src = tiny().cuda().fast_decoder(precision="bf16"), sources().cuda()
    seen, step = [], fast._step
    fast._step = lambda *a: seen.append(torch.backends.cuda.cudnn_sdp_enabled()) or step(*a)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    beam_search(fast, src, DecodeConfig(beam_size=2, max_len_a=0.0, max_len_b=4, min_len=4))
    assert seen == [False] * 4
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
