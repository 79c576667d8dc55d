import math

import pytest
import torch
import torch.nn.functional as F

from aiayn.tasks.loss import class_smoothed_loss, label_smoothed_loss

PAD = 0


def brute_force(logits, target, eps, pad):
    """Σ over non-pad positions of -Σ_k q(k) log p(k), q built entry by entry (pad None: no pad class)."""
    V = logits.shape[-1]
    classes = V if pad is None else V - 1
    total = 0.0
    for row, y in zip(logits.reshape(-1, V), target.reshape(-1).tolist()):
        if y == pad:
            continue
        logp = torch.log_softmax(row.double(), -1)
        q = [0.0 if k == pad else eps / classes + (1 - eps) * (k == y) for k in range(V)]
        total -= sum(qk * float(lp) for qk, lp in zip(q, logp))
    return total


def test_class_smoothing_spreads_epsilon_over_every_class():
    # logits [2, 0], gold 0, ε 0.1: q = [0.95, 0.05]
    sums = class_smoothed_loss(torch.tensor([[2.0, 0.0]]), torch.tensor([0]), 0.1)
    log_p0, log_p1 = 2 - math.log(math.exp(2) + 1), -math.log(math.exp(2) + 1)
    assert float(sums.loss) == pytest.approx(-(0.95 * log_p0 + 0.05 * log_p1))
    assert float(sums.nll) == pytest.approx(-log_p0) and sums.n_tokens == 1
    torch.manual_seed(4)
    scores, targets = torch.randn(6, 3), torch.randint(0, 3, (6,))
    assert float(class_smoothed_loss(scores, targets, 0.2).loss) == pytest.approx(
        brute_force(scores, targets, 0.2, None), rel=1e-5)


def test_class_smoothing_is_the_token_mixture_without_a_pad_class():
    """The sequence loss with a pad column that takes no probability equals the classifier's on the rest."""
    torch.manual_seed(5)
    scores, targets = torch.randn(6, 4), torch.randint(0, 4, (6,))
    with_pad = torch.cat([torch.full((6, 1), -1e4), scores], dim=1)  # (B, 1 + C), pad id 0
    assert float(label_smoothed_loss(with_pad, targets + 1, 0.1, PAD).loss) == pytest.approx(
        float(class_smoothed_loss(scores, targets, 0.1).loss), rel=1e-5)


def test_matches_brute_force_target_distribution():
    torch.manual_seed(1)
    logits = torch.randn(3, 5, 7)
    target = torch.randint(1, 7, (3, 5))
    target[0, 3:] = PAD
    target[2, 1:] = PAD
    sums = label_smoothed_loss(logits, target, 0.1, PAD)
    assert sums.n_tokens == int((target != PAD).sum())
    assert float(sums.loss) == pytest.approx(brute_force(logits, target, 0.1, PAD), rel=1e-5)


def test_hand_computed_uniform_logits():
    # uniform logits: every log p = -log V, q sums to 1 => loss = log V per token, whatever ε
    V = 5
    sums = label_smoothed_loss(torch.zeros(1, 2, V), torch.tensor([[3, 4]]), 0.3, PAD)
    assert float(sums.loss) == pytest.approx(2 * math.log(V))
    assert float(sums.nll) == pytest.approx(2 * math.log(V))


def test_no_smoothing_equals_cross_entropy_and_ignores_pad():
    torch.manual_seed(2)
    logits, target = torch.randn(4, 6, 9), torch.randint(0, 9, (4, 6))
    sums = label_smoothed_loss(logits, target, 0.0, PAD)
    ref = F.cross_entropy(logits.reshape(-1, 9), target.reshape(-1), ignore_index=PAD, reduction="sum")
    assert float(sums.loss) == pytest.approx(float(ref), rel=1e-6)
    assert float(sums.nll) == pytest.approx(float(ref), rel=1e-6)


def test_relation_to_pytorch_label_smoothing():
    """PyTorch's label_smoothing spreads ε/V over all V classes, pad included; ours spreads
    ε/(V-1) over the non-pad classes. When p(pad) ≈ 0 ours equals PyTorch's on the V-1
    non-pad columns."""
    torch.manual_seed(3)
    V, eps = 8, 0.1
    logits, target = torch.randn(10, V), torch.randint(1, V, (10,))
    logp = torch.log_softmax(logits, -1)
    # the formula of the module docstring: (1-ε)·nll + ε/(V-1)·Σ_{k≠pad} -log p_k
    ours = label_smoothed_loss(logits, target, eps, PAD).loss
    nll = F.nll_loss(logp, target, reduction="sum")
    uniform = -logp[:, 1:].sum()
    assert float(ours) == pytest.approx(float((1 - eps) * nll + eps / (V - 1) * uniform), rel=1e-6)
    # p(pad) ≈ 0: PyTorch on the V-1 non-pad columns
    logits_nopad = logits.clone()
    logits_nopad[:, PAD] = -1e4
    ref = F.cross_entropy(logits_nopad[:, 1:], target - 1, label_smoothing=eps, reduction="sum")
    assert float(label_smoothed_loss(logits_nopad, target, eps, PAD).loss) == pytest.approx(float(ref), rel=1e-5)


def test_bf16_logits_are_upcast():
    logits = torch.randn(2, 3, 6).bfloat16()
    target = torch.tensor([[1, 2, 0], [3, 0, 0]])
    sums = label_smoothed_loss(logits, target, 0.1, PAD)
    assert sums.loss.dtype == torch.float32
    assert float(sums.loss) == pytest.approx(brute_force(logits.float(), target, 0.1, PAD), rel=1e-5)


def autograd_reference(logits, target, eps, pad):
    """-Σ q log_softmax(z) with q built as a dense tensor, differentiated by autograd."""
    V = logits.shape[-1]
    z, y = logits.reshape(-1, V), target.reshape(-1)
    q = torch.full_like(z, eps / (V - 1))
    q[:, pad] = 0.0
    q[torch.arange(len(y)), y] += 1 - eps
    q[y == pad] = 0.0
    return -(q * torch.log_softmax(z, -1)).sum()


def test_gradient_matches_autograd_of_the_dense_target_distribution():
    torch.manual_seed(2)
    logits = torch.randn(2, 6, 9, dtype=torch.float64)
    target = torch.randint(1, 9, (2, 6))
    target[1, 4:] = PAD
    ours = logits.clone().requires_grad_()
    ref = logits.clone().requires_grad_()
    (3.0 * label_smoothed_loss(ours, target, 0.2, PAD).loss).backward()
    (3.0 * autograd_reference(ref, target, 0.2, PAD)).backward()
    assert torch.allclose(ours.grad, ref.grad, atol=1e-6)
    assert ours.grad[1, 4:].abs().max() == 0  # pad rows get nothing


def test_gradcheck():
    torch.manual_seed(3)
    logits = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([1, 0, 6, 2, 0])
    assert torch.autograd.gradcheck(lambda z: label_smoothed_loss(z, target, 0.1, PAD).loss, (logits,))


def test_a_non_finite_logit_at_a_pad_position_stays_out_of_the_loss_and_its_gradient():
    """Pad rows were multiplied by 0, and 0 · inf is NaN: the whole update was skipped as non-finite."""
    logits = torch.randn(3, 6, requires_grad=True)
    target = torch.tensor([4, 0, 5])  # the middle row is padding
    clean = label_smoothed_loss(logits, target, 0.1, 0).loss
    clean.backward()
    want = logits.grad.clone()
    spoiled = logits.detach().clone()
    spoiled[1] = float("inf")
    spoiled.requires_grad_(True)
    sums = label_smoothed_loss(spoiled, target, 0.1, 0)
    sums.loss.backward()
    assert torch.equal(sums.loss.detach(), clean.detach()) and torch.isfinite(sums.nll)
    assert torch.equal(spoiled.grad, want)
