import torch

from aiayn.cache import KVCache
from aiayn.config import EOS_ID
from aiayn.decoding import greedy_search

from fake_decoder import A, FakeModel


class EndsBySource(FakeModel):
    """Emits A until the output has (first source token - 3) tokens, then EOS."""

    def init_cache(self, enc, capacity: int = 64) -> KVCache:
        first = self._src[:, :1].float()[:, :, None, None]  # (N, 1, 1, 1), follows reorder
        return KVCache([(first, first)], enc.src_mask, capacity)

    def encode(self, src):
        self._src = src
        return super().encode(src)

    def decode(self, tgt, cache, need_weights=False):
        out = super().decode(tgt, cache)
        n_out = cache.length - 1  # tokens produced so far (BOS excluded)
        ends = cache.cross_k[0][:, 0, 0, 0].long() - 3  # (N,)
        out.logits.fill_(float("-inf"))
        out.logits[:, 0, A] = 0.0
        out.logits[ends <= n_out, 0, A] = float("-inf")
        out.logits[ends <= n_out, 0, EOS_ID] = 0.0
        return out


def test_rows_that_finish_leave_the_batch_without_changing_results():
    model = EndsBySource({}, vocab=24)
    firsts = torch.arange(4, 20)[torch.randperm(16)]
    src = torch.stack([firsts, torch.full((16,), EOS_ID)], 1)  # (16, 2)
    out = greedy_search(model, src, max_len_a=1.0, max_len_b=30)
    assert out == [[A] * (int(f) - 3) for f in firsts]
    assert model.calls < 30  # stopped once every row ended


def test_length_limit_without_eos():
    model = FakeModel({(): {A: 1.0}, (A,): {A: 1.0}, (A, A): {A: 1.0}, (A, A, A): {A: 1.0}})
    src = torch.tensor([[A, EOS_ID], [A, 0]])  # 2 and 1 source tokens
    assert greedy_search(model, src, max_len_a=1.0, max_len_b=1) == [[A, A, A], [A, A]]
