"""IdMap: Hugging Face ids <-> aiayn's fixed special ids, and the rows that move with them."""

from __future__ import annotations

import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.interop.vocab import ABSENT_LOGIT, IdMap


def test_marian_layout_extends_by_one_absent_pad():
    ids = IdMap.build(6, {0: EOS_ID, 1: UNK_ID, 5: BOS_ID})  # eos 0, unk 1, pieces 2..4, pad 5
    assert ids.aiayn_of == (EOS_ID, UNK_ID, 4, 5, 6, BOS_ID) and ids.size == 7 and ids.absent == [PAD_ID]
    rows = torch.arange(6.0)[:, None].expand(6, 3)  # row h holds h
    inside = ids.rows_in(rows)
    assert inside[:, 0].tolist() == [0.0, 5.0, 0.0, 1.0, 2.0, 3.0, 4.0]  # PAD zeros, BOS <- pad, EOS <- eos
    assert torch.equal(ids.rows_out(inside), rows)
    bias = ids.bias_in(torch.arange(1.0, 7.0), torch.zeros(()))
    assert bias[PAD_ID] == ABSENT_LOGIT and torch.equal(ids.rows_out(bias), torch.arange(1.0, 7.0))


def test_a_permutation_round_trips_ids_and_its_dict():
    ids = IdMap.build(5, {3: PAD_ID, 4: BOS_ID, 0: EOS_ID, 1: UNK_ID})
    assert ids.size == 5 and ids.absent == [] and ids.to_aiayn([2, 4]) == [4, BOS_ID]
    assert ids.to_hf(ids.to_aiayn(range(5))) == list(range(5))
    assert IdMap.from_dict(ids.to_dict()) == ids


def test_absent_ids_take_no_probability():
    ids = IdMap.build(3, {2: EOS_ID})  # GPT-2's layout: PAD, BOS and UNK absent
    logits = torch.randn(3)
    ours = torch.zeros(ids.size).index_copy(0, torch.tensor(ids.aiayn_of), logits) + ids.bias_in(None, logits)
    torch.testing.assert_close(ours.log_softmax(-1)[list(ids.aiayn_of)], logits.log_softmax(-1))
