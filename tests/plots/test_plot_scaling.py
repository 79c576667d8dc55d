import numpy as np
import torch

from aiayn.plots import scaling


def test_softmax_jacobian_matches_autograd():
    x = torch.randn(3, 5, dtype=torch.float64)
    p = torch.softmax(x, -1).numpy()
    for row in range(3):
        expected = torch.autograd.functional.jacobian(lambda v: torch.softmax(v, -1), x[row]).numpy()
        np.testing.assert_allclose(scaling.softmax_jacobian(p[row]), expected, atol=1e-12)


def test_statistics_of_uniform_and_one_hot():
    uniform = scaling.softmax_statistics(np.zeros((1, 4)))
    assert uniform["max_prob"] == 0.25 and abs(uniform["entropy"] - 1) < 1e-12
    one_hot = scaling.softmax_statistics(np.array([[100.0, 0.0, 0.0, 0.0]]))
    assert one_hot["max_prob"] > 0.999 and one_hot["entropy"] < 1e-3 and one_hot["grad_norm"] < 1e-3


def test_variance_grows_as_d_k_and_scaling_fixes_it():
    data = scaling.scaling_experiment(dims=(1, 16, 256), n_queries=128, n_keys=32, seed=0)
    np.testing.assert_allclose(data["var_qk"] / data["d_k"], 1.0, rtol=0.25)
    np.testing.assert_allclose(data["var_scaled"], 1.0, rtol=0.25)
    assert np.all(np.diff(data["max_prob_raw"]) > 0)  # sharper as d_k grows
    assert data["grad_norm_raw"][-1] < 0.5 * data["grad_norm_scaled"][-1]  # and the gradient vanishes
    assert np.ptp(data["max_prob_scaled"]) < 0.1  # scaled: about the same at every d_k
