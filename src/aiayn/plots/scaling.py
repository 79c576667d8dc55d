"""Why scaled dot-product attention divides by sqrt(d_k) (§3.2.1, footnote 4).

If the components of q and k are independent with mean 0 and variance 1, then
q·k = Σ q_i k_i has mean 0 and variance d_k. Large logits push the softmax towards a
one-hot vector, where its Jacobian diag(p) - p pᵀ vanishes, so little gradient flows back
through attention. Dividing by sqrt(d_k) restores unit variance at every d_k.
"""

from __future__ import annotations

import numpy as np

from aiayn.plots._figure import DEFAULT_SIZE, check_whole, new_figure, plain_log_ticks

DEFAULT_DIMS = tuple(2**i for i in range(11))  # 1 .. 1024
# The point is made by d_k of a few thousand (the paper's is 64); d_k = 2^16 draws (256 + 32) x 2^16
# normal numbers, in seconds; d_k up to 2^66 (--max-dk 10^20) ran for minutes before this bound.
MAX_DK = 2**16


def softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def softmax_jacobian(p: np.ndarray) -> np.ndarray:
    """d softmax(x)_i / d x_j = p_i (δ_ij - p_j). (..., n) -> (..., n, n)."""
    return p[..., :, None] * (np.eye(p.shape[-1]) - p[..., None, :])


def softmax_statistics(scores: np.ndarray) -> dict[str, float]:
    """Sharpness and gradient size of softmax over the last axis, averaged over the rest.

    max_prob: mean largest probability (1/n = uniform, 1 = one-hot);
    entropy: mean entropy over log(n) (1 = uniform, 0 = one-hot);
    grad_norm: mean Frobenius norm of the Jacobian wrt the logits.
    """
    p = softmax(scores)
    n = scores.shape[-1]
    entropy = -(p * np.log(np.clip(p, 1e-30, None))).sum(-1) / np.log(n)
    grad = np.linalg.norm(softmax_jacobian(p), axis=(-2, -1))
    return {"max_prob": float(p.max(-1).mean()), "entropy": float(entropy.mean()), "grad_norm": float(grad.mean())}


def scaling_experiment(dims=DEFAULT_DIMS, n_queries: int = 256, n_keys: int = 32, seed: int = 0) -> dict[str, np.ndarray]:
    """For each d_k draw unit-variance q (n_queries) and k (n_keys) and measure var(q·k) and
    softmax statistics of the raw and the scaled (÷ sqrt(d_k)) scores. Deterministic in `seed`."""
    for d_k in dims:
        check_whole("d_k", d_k, 1, MAX_DK)
    rng = np.random.default_rng(seed)
    out: dict[str, list[float]] = {"d_k": [], "var_qk": [], "var_scaled": []}
    for d_k in dims:
        q = rng.standard_normal((n_queries, d_k), dtype=np.float32)
        k = rng.standard_normal((n_keys, d_k), dtype=np.float32)
        scores = (q @ k.T).astype(np.float64)  # (n_queries, n_keys)
        scaled = scores / np.sqrt(d_k)
        out["d_k"].append(d_k)
        out["var_qk"].append(float(scores.var()))
        out["var_scaled"].append(float(scaled.var()))
        for tag, s in (("raw", scores), ("scaled", scaled)):
            for name, value in softmax_statistics(s).items():
                out.setdefault(f"{name}_{tag}", []).append(value)
    return {key: np.asarray(values) for key, values in out.items()}


def plot_scaling(dims=DEFAULT_DIMS, n_queries: int = 256, n_keys: int = 32, seed: int = 0,
                 size: tuple[int, int] = DEFAULT_SIZE):
    """Four panels over d_k (log scale): var(q·k); max softmax probability; softmax entropy;
    Jacobian norm, each with and without 1/sqrt(d_k). Returns (figure, experiment arrays)."""
    data = scaling_experiment(dims, n_queries, n_keys, seed)
    d = data["d_k"]
    fig = new_figure(size)
    var_ax, max_ax, ent_ax, grad_ax = fig.subplots(2, 2).flat
    var_ax.loglog(d, data["var_qk"], "o-", label="var(q·k)")
    var_ax.loglog(d, data["var_scaled"], "s-", label="var(q·k / √d_k)")
    var_ax.loglog(d, d, ":", color="gray", label="d_k")
    var_ax.set(title="variance of the logits", ylabel="variance")
    panels = ((max_ax, "max_prob", "softmax sharpness: largest probability"),
              (ent_ax, "entropy", "softmax entropy / log(n keys)"),
              (grad_ax, "grad_norm", "gradient size: ‖∂softmax/∂logits‖_F"))
    for ax, key, title in panels:
        ax.plot(d, data[f"{key}_raw"], "o-", color="tab:red", label="softmax(q·k)")
        ax.plot(d, data[f"{key}_scaled"], "s-", color="tab:green", label="softmax(q·k / √d_k)")
        ax.set(title=title, xscale="log")
    grad_ax.set_yscale("log")
    plain_log_ticks(var_ax.yaxis)
    plain_log_ticks(grad_ax.yaxis, minor=True)
    for ax in (var_ax, max_ax, ent_ax, grad_ax):
        ax.set_xscale("log", base=2)
        plain_log_ticks(ax.xaxis)
        ax.set_xlabel("d_k")
        ax.legend(fontsize=8)
    fig.suptitle(f"§3.2.1: why scale by 1/√d_k ({n_queries} queries x {n_keys} keys, unit-variance components)")
    return fig, data
