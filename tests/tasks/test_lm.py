"""The language-modelling task: nanoGPT's split, contiguous blocks, the character vocabulary, a
learning check through `aiayn train`, and generation."""

import pytest
import torch

from aiayn.cli import main
from aiayn.data.tokenizer import CharTokenizer, TokenizerPair, load_tokenizers, save_tokenizers
from aiayn.tasks.lm import LMTask
from aiayn.tasks.lm import Generator, split_text
from aiayn.training.config import load_config
from aiayn.distributed import SINGLE


def lm_config(corpus, *overrides):
    return load_config(None, [
        'task="lm"', 'model.type="decoder-only"', "model.d_model=32", "model.n_heads=2", "model.n_layers=2",
        "model.d_ff=64", "model.max_positions=8", f'data.corpus="{corpus}"',
        'data.vocab_type="chars"', "data.max_tokens=32", "train.max_updates=1", "train.bleu=false", *overrides])


def test_split_is_nanogpts_first_90_percent_of_characters():
    text = "".join(chr(97 + i % 26) for i in range(1000))
    train, valid = split_text(text, 0.1)
    assert (train, valid) == (text[:900], text[900:])


def test_char_tokenizer_round_trips_and_saves(tmp_path):
    tok = CharTokenizer.from_text("hello, world\n")
    text = "hello\nworld, low"
    assert tok.decode(tok.encode(text)) == text and len(tok.encode(text)) == len(text)
    assert tok.encode("z") == [3]  # unknown -> UNK
    save_tokenizers(TokenizerPair.shared(tok), tmp_path)
    assert load_tokenizers(tmp_path).src.encode(text) == tok.encode(text)


def prepared(tmp_path, text="0123456789" * 40, *overrides) -> LMTask:
    corpus = tmp_path / "text.txt"
    corpus.write_text(text)
    task = LMTask(lm_config(corpus, *overrides))
    task.prepare(tmp_path / "run", SINGLE)
    return task


def test_blocks_are_windows_with_targets_shifted_by_one(tmp_path):
    task = prepared(tmp_path)
    assert (task.block, task.rows) == (8, 4)
    epoch0, again, epoch1 = task.train_data(SINGLE)(0), task.train_data(SINGLE)(0), task.train_data(SINGLE)(1)
    batch = epoch0[0]
    assert batch.x.shape == batch.y.shape == (4, 8)
    assert torch.equal(batch.x[:, 1:], batch.y[:, :-1])  # y is x shifted by one position
    digits = lambda t: (t - 4).remainder(10)  # noqa: E731  ids 4.. are "0".."9" in order
    assert torch.equal(digits(batch.y), (digits(batch.x) + 1) % 10)  # the next character of the text
    assert torch.equal(again[0].x, batch.x) and not torch.equal(epoch1[0].x, batch.x)  # seeded by epoch
    valid = task.valid_data()
    seen = torch.cat([b.x.reshape(-1) for b in valid])
    assert torch.equal(seen, torch.as_tensor(task.valid_ids[: len(seen)], dtype=torch.long))  # in order, no overlap


def test_validation_text_outside_the_training_vocabulary_is_named_in_a_warning(tmp_path, caplog):
    """The last 10% holds characters the first 90% lacks: they were validated on as <unk> without a word."""
    with caplog.at_level("WARNING", logger="aiayn.tasks.lm"):
        prepared(tmp_path, "0123456789" * 36 + "ABCDEFGHIJ" * 4)
    assert "40 of the 40 validation tokens (100.0%) are <unk>" in caplog.text
    caplog.clear()
    (tmp_path / "b").mkdir()
    with caplog.at_level("WARNING", logger="aiayn.tasks.lm"):
        prepared(tmp_path / "b", "0123456789" * 40)
    assert "<unk>" not in caplog.text


def test_too_short_a_text_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="too short for blocks of 8 tokens"):
        prepared(tmp_path, "abc" * 10)


@pytest.mark.slow  # a learning check of more than a few seconds
def test_a_tiny_gpt_learns_a_repeating_text_and_generates_it(tmp_path, capsys):
    """A learning check through `aiayn train`: the text is periodic, so the model can be exact."""
    corpus = tmp_path / "text.txt"
    corpus.write_text("abcdefg" * 300)
    recipe = tmp_path / "lm.toml"
    recipe.write_text("[train]\nmax_updates = 150\n")
    args = ["train", str(recipe), "--set", 'task="lm"', "--set", 'model.type="decoder-only"', "--set", "model.d_model=32",
            "--set", "model.n_heads=2", "--set", "model.n_layers=2", "--set", "model.d_ff=64",
            "--set", "model.max_positions=16", "--set", f'data.corpus="{corpus}"',
            "--set", 'data.vocab_type="chars"', "--set", "data.max_tokens=128",
            "--set", "optim.warmup_steps=20", "--set", "optim.label_smoothing=0.0", "--set", "train.bleu=false",
            "--set", "train.progress=false", "--set", "optim.lr_factor=2.0",
            "--run-dir", str(tmp_path / "run")]
    assert main(args) == 0
    model_dir = str(tmp_path / "run" / "model")
    assert Generator.from_pretrained(model_dir).generate("cde", 10, method="greedy") == "fgabcdefga"
    capsys.readouterr()
    assert main(["generate", "--model", model_dir, "--prompt", "ab", "--method", "greedy", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out == "abcdefg\n"
    long = Generator.from_pretrained(model_dir).generate("abc", 40, method="greedy")  # past the block of 16
    assert long == ("defgabc" * 6)[:40]
    assert main(["generate", "--model", model_dir, "--prompt", "abc", "--max-new-tokens", "30", "--seed", "3"]) == 0
    assert len(capsys.readouterr().out) == 3 + 30 + 1
    assert main(["generate", "--model", model_dir, "--seed", "3"]) == 0  # the rest as the pipeline's defaults
    assert capsys.readouterr().out == "\n" + Generator.from_pretrained(model_dir).generate("\n", seed=3) + "\n"


def test_generate_refuses_sampling_settings_under_greedy_and_an_unknown_method():
    """As the other doors do (Translator.settings): not silently ignored, and a typo is no sampling."""
    torch.manual_seed(0)
    from aiayn.models.decoder_only import DecoderOnly, DecoderOnlyConfig

    tokenizer = CharTokenizer.from_text("abcdefgh")
    generator = Generator(DecoderOnly(DecoderOnlyConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2,
                                                        n_layers=1, d_ff=32, max_positions=8)), tokenizer)
    with pytest.raises(ValueError, match="temperature, top_k set for sampling, but the method is 'greedy'"):
        generator.generate("abc", 3, method="greedy", temperature=0.5, top_k=2)
    with pytest.raises(ValueError, match="method must be one of 'sample', 'greedy', got 'greedyy'"):
        generator.generate("abc", 3, method="greedyy", seed=1)
    assert generator.generate("abc", 3, method="greedy", seed=7) == generator.generate("abc", 3, method="greedy")
    for bad in ({"top_p": 1.5}, {"temperature": 0.0}, {"max_new_tokens": 0}):  # refused before the first token is asked for
        (name, value), = bad.items()
        with pytest.raises(ValueError, match=f"^{name} must be .*, got {value}$"):
            generator.stream("abc", **{"max_new_tokens": 3, **bad})
        with pytest.raises(ValueError, match=f"^{name} must be .*, got {value}$"):
            generator.tokens("abc", **{"max_new_tokens": 3, **bad})


def test_a_continuation_keeps_the_space_a_word_piece_starts_with():
    """Decoded alone, sentencepiece drops a continuation's leading "▁": "hello" + "park" came out as
    "hellopark" through every door. Now it is the text that follows the prompt, stream and whole alike."""
    import random

    from aiayn.data.tokenizer import SentencePieceTokenizer
    from aiayn.models.decoder_only import DecoderOnly, DecoderOnlyConfig

    rng = random.Random(0)
    words = ["park", "hello", "world", "tree", "stone", "river", "light"]
    tok = SentencePieceTokenizer.train([" ".join(rng.choice(words) for _ in range(8)) for _ in range(300)],
                                       vocab_size=300)
    torch.manual_seed(0)
    model = DecoderOnly(DecoderOnlyConfig(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32))
    gen = Generator(model, tok)
    prompt = "hello"
    for seed in range(8):
        ids = list(gen.tokens(prompt, 6, "sample", seed))
        whole = tok.decode(tok.encode(prompt) + ids)
        assert gen.generate(prompt, 6, "sample", seed) == whole[len(tok.decode(tok.encode(prompt))):]
        assert "".join(gen.stream(prompt, 6, "sample", seed)) == gen.generate(prompt, 6, "sample", seed)
    park = tok.encode("park")  # ["▁park"]: a word start
    assert tok.decode(park) == "park" and gen._continuation(tok.encode(prompt))(park) == " park"  # after "hello": a new word


@pytest.mark.parametrize("method", ["greedy", "sample"])
def test_a_generated_text_never_holds_unk(method):
    """A model that puts most of its mass on <unk> (text outside its vocabulary) wrote a literal "<unk>"."""
    torch.manual_seed(0)
    from aiayn.config import EOS_ID, UNK_ID
    from aiayn.models.decoder_only import DecoderOnly, DecoderOnlyConfig

    tokenizer = CharTokenizer.from_text("abcdefgh")
    model = DecoderOnly(DecoderOnlyConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                          max_positions=8, logits_bias=True))
    with torch.no_grad():
        model.logits_bias[UNK_ID] = 8.0  # e^8: <unk> above all the rest together
        model.logits_bias[EOS_ID] = -8.0  # and no end: twelve characters
    text = Generator(model, tokenizer).generate("abc", 12, method=method, seed=1)
    assert len(text) == 12 and "<unk>" not in text
