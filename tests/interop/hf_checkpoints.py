"""Small Hugging Face checkpoints for the interop tests, built with `transformers` from configs with
random weights (nothing can be downloaded), with tokenizers trained on a few hundred lines of
../shared/data: sentencepiece for Marian, the `tokenizers` library for GPT-2 (byte-level BPE) and
BERT (WordPiece). Each builder writes a directory as `save_pretrained` does and returns it."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import torch

from shared_data import SHARED_DATA


def lines(name: str, n: int, skip: int = 0) -> list[str]:
    """`n` lines of a ../shared/data file after the first `skip`."""
    with gzip.open(SHARED_DATA / name, "rt", encoding="utf-8") as f:
        out = [line.rstrip("\n") for _, line in zip(range(skip + n), f)]
    return out[skip:]


def _spm(texts: list[str], vocab_size: int) -> bytes:
    import sentencepiece as spm

    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=proto, vocab_size=vocab_size,
                                   minloglevel=2, num_threads=1, hard_vocab_limit=False)
    return proto.getvalue()


def marian(directory: Path, d_model: int = 16, layers: int = 2, heads: int = 2, d_ff: int = 32,
           spm_size: int = 300, activation: str = "swish", scale_embedding: bool = True, seed: int = 0,
           init_std: float = 0.02, vocab_size: int | None = None, train_steps: int = 0) -> Path:
    """A MarianMTModel de->en with its tokenizer (source.spm, target.spm, vocab.json). Its vocabulary
    is the two sentencepiece models' pieces (Marian's eos 0, unk 1, pad last), padded with unused
    pieces up to `vocab_size` when given; final_logits_bias is random, so that it counts.
    `train_steps` > 0: that many Adam steps on the 400 sentence pairs the tokenizers saw, so that
    beam search has real choices (random weights end every hypothesis at once or never)."""
    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    src_spm, tgt_spm = _spm(lines("multi30k/train.de.gz", 400), spm_size), _spm(lines("multi30k/train.en.gz", 400), spm_size)
    (directory / "source.spm").write_bytes(src_spm)
    (directory / "target.spm").write_bytes(tgt_spm)
    pieces = []
    for proto in (src_spm, tgt_spm):
        sp = spm.SentencePieceProcessor(model_proto=proto)
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)]
    vocab = {"</s>": 0, "<unk>": 1}
    for p in pieces:
        vocab.setdefault(p, len(vocab))
    while vocab_size is not None and len(vocab) < vocab_size - 1:
        vocab[f"<unused{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    MarianTokenizer(str(directory / "source.spm"), str(directory / "target.spm"), str(directory / "vocab.json"),
                    source_lang="de", target_lang="en").save_pretrained(directory)
    V = len(vocab)
    torch.manual_seed(seed)
    config = MarianConfig(vocab_size=V, decoder_vocab_size=V, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
                          encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=d_ff,
                          decoder_ffn_dim=d_ff, activation_function=activation, max_position_embeddings=256,
                          scale_embedding=scale_embedding, pad_token_id=V - 1, decoder_start_token_id=V - 1,
                          eos_token_id=0, forced_eos_token_id=0, init_std=init_std)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.5)
    if train_steps:
        tokenizer = MarianTokenizer.from_pretrained(directory)
        _train(model, tokenizer, lines("multi30k/train.de.gz", 400), lines("multi30k/train.en.gz", 400), train_steps)
    model.save_pretrained(directory)
    return directory


def _train(model, tokenizer, src: list[str], tgt: list[str], steps: int, batch: int = 32) -> None:
    """Teacher-forced Adam steps on the pairs (dropout off): enough for a tiny model to learn lengths."""
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        pick = torch.randint(0, len(src), (batch,), generator=g).tolist()
        b = tokenizer([src[i] for i in pick], text_target=[tgt[i] for i in pick], return_tensors="pt", padding=True)
        b["labels"] = b["labels"].masked_fill(b["labels"] == tokenizer.pad_token_id, -100)
        loss = model(**b).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def _save_tokenizer(backend, directory: Path, **specials) -> None:
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=backend, **specials).save_pretrained(directory)


def gpt2(directory: Path, d_model: int = 16, layers: int = 2, heads: int = 2, vocab_size: int = 400, seed: int = 0) -> Path:
    """A GPT2LMHeadModel with a byte-level BPE trained on tiny Shakespeare (<|endoftext|> its last id)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    directory.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(lines("tinyshakespeare/input.txt.gz", 500), vocab_size=vocab_size - 1, show_progress=False)
    bpe.add_special_tokens(["<|endoftext|>"])
    V = bpe.get_vocab_size()
    _save_tokenizer(bpe._tokenizer, directory, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=V, n_embd=d_model, n_layer=layers, n_head=heads, n_positions=64,
                        bos_token_id=V - 1, eos_token_id=V - 1)
    GPT2LMHeadModel(config).eval().save_pretrained(directory)
    return directory


def bert(directory: Path, mlm: bool = False, d_model: int = 16, layers: int = 2, heads: int = 2,
         vocab_size: int = 400, seed: int = 0) -> Path:
    """A BertForSequenceClassification (3 labels) or BertForMaskedLM with a WordPiece vocabulary
    trained on SST-2 texts."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

    directory.mkdir(parents=True, exist_ok=True)
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    texts = [line.split("\t")[0] for line in lines("sst2/train_full.tsv.gz", 500, skip=1)]
    wordpiece.train_from_iterator(texts, vocab_size=vocab_size, show_progress=False)
    from tokenizers.processors import BertProcessing  # [CLS] text [SEP], as a BERT tokenizer.json has it

    wordpiece.post_processor = BertProcessing(("[SEP]", wordpiece.token_to_id("[SEP]")),
                                              ("[CLS]", wordpiece.token_to_id("[CLS]")))
    _save_tokenizer(wordpiece._tokenizer, directory, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                    sep_token="[SEP]", mask_token="[MASK]")
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=wordpiece.get_vocab_size(), hidden_size=d_model, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=2 * d_model, max_position_embeddings=64,
                        pad_token_id=wordpiece.token_to_id("[PAD]"),
                        id2label={0: "negative", 1: "neutral", 2: "positive"},
                        label2id={"negative": 0, "neutral": 1, "positive": 2})
    model = (BertForMaskedLM if mlm else BertForSequenceClassification)(config).eval()
    _randomize_vectors(model)
    model.save_pretrained(directory)
    return directory


def _randomize_vectors(model) -> None:
    """Biases, norm gains and ViT's [CLS] vector (zeros or ones at init) random, so that each one counts."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 or "cls_token" in name:
                p.add_(torch.randn_like(p), alpha=0.1)


def vit(directory: Path, d_model: int = 16, layers: int = 2, heads: int = 2, seed: int = 0) -> Path:
    """A ViTForImageClassification of 8x8 one-channel images in 2x2 patches, 10 classes (the digits)."""
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(seed)
    config = ViTConfig(hidden_size=d_model, num_hidden_layers=layers, num_attention_heads=heads,
                       intermediate_size=2 * d_model, image_size=8, patch_size=2, num_channels=1,
                       id2label={i: str(i) for i in range(10)}, label2id={str(i): i for i in range(10)})
    model = ViTForImageClassification(config).eval()
    _randomize_vectors(model)
    model.save_pretrained(directory)
    return directory


def tensors(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def assert_same_tensors(original: Path, exported: Path) -> None:
    """The round trip import -> export gives the checkpoint's tensors: the same names, bit for bit."""
    a, b = tensors(original), tensors(exported)
    assert sorted(a) == sorted(b)
    for name in a:
        assert torch.equal(a[name], b[name]), name


def assert_logits_close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Within 1e-5 (fp32)."""
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0.0)
