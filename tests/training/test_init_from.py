"""`train.init_from`: a fresh run starts from another model's weights only where the vocabularies
agree piece for piece (`aiayn.training.pipeline.load_matching`)."""

import logging

import pytest
import torch

from aiayn.cli import main
from aiayn.config import TransformerConfig
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, load_tokenizers, save_tokenizers
from aiayn.models.transformer import Transformer
from aiayn.training.pipeline import load_matching

SYMBOLS = [chr(ord("a") + i) for i in range(12)]


def pair(symbols) -> TokenizerPair:
    return TokenizerPair.shared(SymbolTokenizer(symbols))


def saved_model(directory, tokenizers: TokenizerPair) -> Transformer:
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=tokenizers.src.vocab_size))
    model.save_pretrained(directory)
    save_tokenizers(tokenizers, directory)
    return model


def fresh(tokenizers: TokenizerPair) -> Transformer:
    torch.manual_seed(1)  # other initial weights than the saved model's
    return Transformer(TransformerConfig.preset("tiny", src_vocab_size=tokenizers.src.vocab_size))


def test_the_same_vocabulary_loads_every_tensor(tmp_path):
    source = saved_model(tmp_path, pair(SYMBOLS))
    model = fresh(pair(SYMBOLS))
    load_matching(model, tmp_path, pair(SYMBOLS))
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in model.state_dict().items())


def test_a_vocabulary_of_the_same_size_with_other_pieces_is_refused(tmp_path):
    saved_model(tmp_path, pair(SYMBOLS))
    other = pair(SYMBOLS[:2] + SYMBOLS[2:][::-1])  # the same 12 symbols: a and b keep their ids, 10 swap
    model = fresh(other)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"only 6 of 16 ids mean the same piece.*data.tokenizer"):  # 4 specials + 2
        load_matching(model, tmp_path, other)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # nothing loaded


def test_a_vocabulary_of_another_size_keeps_fresh_embeddings_with_a_warning(tmp_path, caplog):
    source = saved_model(tmp_path, pair(SYMBOLS))
    larger = pair(SYMBOLS + ["x", "y"])
    model = fresh(larger)
    embeddings = {"encoder.embed.weight", "decoder.embed.weight"}  # one tensor: a joint vocabulary shares it
    before = {k: model.state_dict()[k].clone() for k in embeddings}
    with caplog.at_level(logging.INFO, logger="aiayn.training.pipeline"):
        load_matching(model, tmp_path, larger)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "16 pieces, this run's 18" in warnings[0] and "encoder.embed.weight (16, 32) -> (18, 32)" in warnings[0]
    state = model.state_dict()
    assert all(torch.equal(state[k], before[k]) for k in embeddings)  # fresh
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in state.items() if k not in embeddings)  # the body loaded


def test_a_model_directory_without_a_tokenizer_cannot_be_checked(tmp_path):
    Transformer(TransformerConfig.preset("tiny", src_vocab_size=16)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="tokenizer"):
        load_matching(fresh(pair(SYMBOLS)), tmp_path, pair(SYMBOLS))


TINY = """
[model]
preset = "tiny"
[data]
corpus = "synthetic"
vocab_type = "symbols"
n_train = 60
n_valid = 4
max_len = 6
max_tokens = 300
[train]
max_updates = 1
validate_every = 0
progress = false
"""


def test_train_refuses_init_from_with_another_vocabulary_of_the_same_size(tmp_path, capsys):
    """Through `aiayn train`: the pipeline hands the run's vocabulary to the check."""
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY)
    assert main(["train", str(recipe), "--run-dir", str(tmp_path / "a")]) == 0
    vocab = load_tokenizers(tmp_path / "a" / "model").src
    save_tokenizers(pair(vocab.pieces(range(4, vocab.vocab_size))[::-1]), tmp_path / "reversed")  # after the 4 specials
    capsys.readouterr()
    init = ["--set", f'train.init_from="{tmp_path / "a" / "model"}"']
    assert main(["train", str(recipe), "--run-dir", str(tmp_path / "b"), *init,
                 "--set", f'data.tokenizer="{tmp_path / "reversed"}"']) == 2
    assert "ids mean the same piece" in capsys.readouterr().err
    assert main(["train", str(recipe), "--run-dir", str(tmp_path / "c"), *init,
                 "--set", f'data.tokenizer="{tmp_path / "a" / "model"}"']) == 0
