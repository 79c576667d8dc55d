"""MLM pre-training (`aiayn.tasks.mlm`): the [MASK] piece, BERT's masking rates, and more text
for the MLM alone. The MLM-then-classifier learning check is in test_classify.py."""

import gzip

import pytest
import torch

from aiayn.config import PAD_ID, UNK_ID
from aiayn.data.tokenizer import SentencePieceTokenizer
from aiayn.tasks.mlm import MLMTask, mask_id_of, mask_tokens
from aiayn.training.config import load_config
from aiayn.distributed import SINGLE


def test_mask_id_is_the_mask_piece_and_a_vocabulary_without_one_is_refused():
    texts = [f"the film {w} number {i} ." for i in range(200) for w in ("was good", "was bad")]
    with_mask = SentencePieceTokenizer.train(texts, vocab_size=320, model_type="bpe", user_symbols=("[MASK]",))
    assert with_mask.pieces([mask_id_of(with_mask)]) == ["[MASK]"]
    without = SentencePieceTokenizer.train(texts, vocab_size=320, model_type="bpe")
    with pytest.raises(ValueError, match=r"no \[MASK\] piece"):
        mask_id_of(without)


def test_masking_rates_over_many_draws():
    tokens = torch.randint(10, 1000, (400, 250))
    tokens[:, 200:] = PAD_ID
    inputs, targets = mask_tokens(tokens, mask_id=5, vocab_size=1000, generator=torch.Generator().manual_seed(0))
    chosen = targets != PAD_ID
    real = tokens != PAD_ID
    assert not chosen[~real].any()  # padding is never chosen
    assert abs(chosen.sum().item() / real.sum().item() - 0.15) < 0.005
    assert torch.equal(targets[chosen], tokens[chosen]) and torch.equal(inputs[~chosen], tokens[~chosen])
    n = chosen.sum().item()
    as_mask = (inputs[chosen] == 5).sum().item() / n
    kept = (inputs[chosen] == tokens[chosen]).sum().item() / n  # kept, or a random draw of the same id (rare)
    assert abs(as_mask - 0.8) < 0.01 and abs(kept - 0.1) < 0.01 and abs(1 - as_mask - kept - 0.1) < 0.01


def test_mlm_extra_texts_join_the_training_split_but_not_the_vocabulary(tmp_path):
    (tmp_path / "train.tsv").write_text("a b\t0\nb c\t1\n")
    with gzip.open(tmp_path / "more.txt.gz", "wt") as f:
        f.write("A C\n\nc a b a\nzz\n")
    cfg = load_config(None, ['task="mlm"', 'model.type="encoder-only"', f'data.corpus="{tmp_path}"', 'data.valid_split=""',
                             'data.vocab_type="symbols"', "train.max_updates=1", "data.max_input_tokens=3",
                             f'data.extra_texts=["{tmp_path / "more.txt.gz"}"]', "data.lowercase_extra_texts=true"])
    task = MLMTask(cfg)
    task.prepare(tmp_path / "run", SINGLE)
    ids, labels = task.splits["train"]
    src = task.tokenizers.src
    assert [src.decode(s) for s in ids] == ["a b", "b c", "a c", "c a b", src.decode(src.encode("zz"))]
    assert src.encode("zz") == [UNK_ID] and UNK_ID not in src.encode("a b c")  # the training file's words only
    assert labels[2:] == [-1, -1, -1] and task.drops.counts["extra_texts"]["truncated"] == 1
