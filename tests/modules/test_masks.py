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


def test_from_start_truth_table():
    # row 0 starts at column 2 (two columns of left padding), row 1 at column 0
    m = masks.from_start(torch.tensor([2, 0]), 4)
    assert m.shape == (2, 1, 1, 4)
    assert m[:, 0, 0].tolist() == [[False, False, True, True], [True, True, True, True]]


def test_open_empty_rows_opens_only_the_rows_without_keys():
    m = torch.tensor([[True, False], [False, False]])
    opened = masks.open_empty_rows(m, masks.rows_with_keys(m))
    assert opened.tolist() == [[True, False], [True, True]]
