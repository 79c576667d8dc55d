"""`train.init_from`: a fresh run starts from another model's weights only where the vocabularies
agree piece for piece (`aiayn.training.pipeline.load_matching`)."""

import dataclasses
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


# -- a run started from a directory takes its architecture -----------------------------------------
def bert_like(directory, tokenizers: TokenizerPair):
    """An encoder-only directory with BERT's options, none of them the recipe's defaults, and a pooler."""
    from aiayn.models.encoder_only import EncoderOnly, EncoderOnlyConfig

    config = EncoderOnlyConfig(vocab_size=tokenizers.src.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                               activation="gelu", scale_embeddings=False, embedding_norm=True, type_vocab_size=2,
                               layer_norm_eps=1e-12, pooler=True, attention_dropout=0.1)
    model = EncoderOnly(config)
    model.save_pretrained(directory)
    save_tokenizers(tokenizers, directory)
    return model


def test_the_started_architecture_is_the_directorys_with_the_runs_head(tmp_path):
    from aiayn.training.config import ModelSpec
    from aiayn.training.pipeline import started_architecture

    saved = bert_like(tmp_path, pair(SYMBOLS)).config
    spec = ModelSpec.from_dict({"type": "encoder-only", "pooler": True, "dropout": 0.2})
    built = spec.build(16, 16, n_classes=3)  # what the recipe alone would build: ReLU, no embedding norm...
    model_type, started = started_architecture(tmp_path, "encoder-only", built, spec)
    assert model_type == "encoder-only"
    assert started == dataclasses.replace(saved, n_classes=3, dropout=0.2)  # attention_dropout stays the directory's


@pytest.mark.parametrize("override, message", [
    ({"d_model": 32}, r"model.d_model = 32, but the model there has 16.*drop model.d_model"),
    ({"type": "encoder-decoder"}, r"its model is encoder-only, but this run's model.type is 'encoder-decoder'"),
])
def test_a_recipe_that_contradicts_the_directory_is_refused(tmp_path, override, message):
    from aiayn.config import ConfigError
    from aiayn.training.config import ModelSpec
    from aiayn.training.pipeline import started_architecture

    bert_like(tmp_path, pair(SYMBOLS))
    spec = ModelSpec.from_dict({"type": "encoder-only", "n_heads": 2, **override})
    built = spec.build(16, 16)
    with pytest.raises(ConfigError, match=message):
        started_architecture(tmp_path, spec.type, built, spec)


def test_tensors_of_the_directory_that_the_model_does_not_use_are_named(tmp_path, caplog):
    from aiayn.models.encoder_only import EncoderOnly

    source = bert_like(tmp_path, pair(SYMBOLS))
    without_pooler = EncoderOnly(dataclasses.replace(source.config, pooler=False, n_classes=2))
    with caplog.at_level(logging.WARNING, logger="aiayn.training.pipeline"):
        load_matching(without_pooler, tmp_path, pair(SYMBOLS))
    assert "2 tensors of it are not in this model and are not used: pool.bias, pool.weight" in caplog.text


def test_the_vocabulary_is_the_directorys_unless_data_tokenizer_says_another(tmp_path):
    from aiayn.training.config import TrainConfig

    def data_tokenizer(**data) -> str:
        return TrainConfig.from_dict({"task": "classify", "data": data,
                                      "train": {"max_updates": 1, "init_from": str(tmp_path)}}).data.tokenizer

    assert data_tokenizer() == str(tmp_path)
    assert data_tokenizer(tokenizer="elsewhere") == "elsewhere"
