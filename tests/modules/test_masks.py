import torch

from aiayn.modules import masks


def test_padding_mask_truth_table():
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    assert masks.padding_mask(tokens, 0).tolist() == [[True, True, False], [True, False, False]]


def test_causal_mask_truth_table():
    assert masks.causal_mask(3).tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]


def test_causal_mask_with_past_positions():
    # Two new queries at absolute positions 2 and 3 over four keys.
    assert masks.causal_mask(2, past=2).tolist() == [
        [True, True, True, False],
        [True, True, True, True],
    ]


def test_masks_combine_with_and():
    keep = torch.tensor([[True, True, False]])
    combined = masks.key_mask(keep) & masks.causal_mask(3)  # (1, 1, 3, 3)
    assert combined.shape == (1, 1, 3, 3)
    assert combined[0, 0].tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, False],
    ]


def test_rows_with_keys():
    m = torch.tensor([[True, False], [False, False]])
    assert masks.rows_with_keys(m).tolist() == [[True], [False]]
