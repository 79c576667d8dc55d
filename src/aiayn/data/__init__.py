"""Data: parallel corpora -> subword ids -> token-bucketed, padded batches.

The trainer's entry point::

    from aiayn.data import load_parallel, train_tokenizers

    corpus = read_corpus("multi30k", split="train", langs=("en", "de"))        # raw text
    tokenizers = train_tokenizers(corpus.src, corpus.tgt)  # joint BPE, DEFAULT_VOCAB_SIZE pieces
    save_tokenizers(tokenizers, model_dir)                                      # beside config.json
    train = load_parallel("multi30k", tokenizers, split="train", langs=("en", "de"), max_len=256)
    sampler = train.sampler(max_tokens=4096, seed=1, rank=rank, world_size=world_size)
    for epoch in ...:
        for indices in sampler.batches(epoch):
            batch = train.collate(indices)   # Batch: src (B,S), tgt_in/tgt_out (B,T), n_tgt_tokens

`load_parallel(source, tokenizers, *, split="train", langs=None, data_dir=None,
cache_dir=None, max_len=None, max_ratio=None, strict=False) -> ParallelDataset`

- `source`: a registered corpus name ("multi30k", "small-parallel-enja"), a directory of
  `{split}.{lang}[.gz]` files, a TSV file (`source<TAB>target`), or a (source file,
  target file) pair. Names and directories need `langs=(source lang, target lang)`.
- `data_dir`: local directory for a registered corpus (else `$AIAYN_DATA_DIR`, else download).
- `cache_dir`: downloads and tokenized arrays (default `$AIAYN_CACHE_DIR` or `~/.cache/aiayn`).
- `max_len` / `max_ratio`: drop pairs longer than `max_len` subword tokens on either side
  or with a length ratio above `max_ratio`; counts are in `dataset.stats`.
- `strict`: an empty side is an error instead of a counted skip.

Errors: `CorpusError` (a ValueError) and `FileNotFoundError`, messages naming file and line.
Special ids are PAD 0, BOS 1, EOS 2, UNK 3 (`aiayn.config`); `encode` adds neither BOS nor
EOS; `collate` builds src = x + EOS, tgt_in = BOS + y and tgt_out = y + EOS.
"""

from aiayn.data.batching import Batch, TokenBucketSampler, collate, padding_efficiency
from aiayn.data.corpus import CorpusError, CorpusStats, ParallelCorpus, read_corpus
from aiayn.data.preprocess import ParallelDataset, load_parallel
from aiayn.data.tokenizer import (
    SentencePieceTokenizer, SymbolTokenizer, Tokenizer, TokenizerPair, load_tokenizers, save_tokenizers,
    train_tokenizers,
)

__all__ = [
    "Batch", "TokenBucketSampler", "collate", "padding_efficiency",
    "CorpusError", "CorpusStats", "ParallelCorpus", "read_corpus",
    "ParallelDataset", "load_parallel",
    "SentencePieceTokenizer", "SymbolTokenizer", "Tokenizer", "TokenizerPair", "load_tokenizers",
    "save_tokenizers", "train_tokenizers",
]
