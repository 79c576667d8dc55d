"""Translation (§5-§6): parallel text in, sacreBLEU out, `Translator` for inference.

    data        a corpus (`aiayn.data`: a registered name, a {split}.{lang} directory, a TSV
                file) read and tokenized through `load_parallel`, whose cache `aiayn prepare`
                fills; or the built-in synthetic task. Source = ids + EOS, target BOS + y -> y + EOS.
    validation  greedy sacreBLEU on the validation text (`train.bleu`)
    test        beam search with `[decode]` (beam 4, α 0.6) on `data.test_split`: sacreBLEU
    inference   `aiayn.decoding.translator.Translator`

Vocabulary, loss, batching and the test run are the shared ones of `aiayn.tasks.seq2seq`.
"""

from __future__ import annotations

from aiayn.data.preprocess import ParallelDataset, load_parallel
from aiayn.tasks.base import TOKENIZER_DIR
from aiayn.tasks.seq2seq import Examples, Seq2SeqTask
from aiayn.training.config import DataConfig

__all__ = ["TOKENIZER_DIR", "TranslationTask", "read_text"]


class TranslationTask(Seq2SeqTask):
    name = "translation"

    def examples(self, split: str) -> Examples:
        return read_text(self.data, split, self.cfg.train.seed)

    def dataset(self, split: str) -> ParallelDataset:
        """Token ids of `split`: through `load_parallel` and its cache, or the synthetic task's pairs."""
        data = self.data
        if data.corpus == "synthetic":
            ex = self.examples(split)
            return ParallelDataset.from_corpus(list(zip(ex.src, ex.tgt)), self.tokenizers)
        return load_parallel(data.corpus, self.tokenizers, split=split, langs=(data.src_lang, data.tgt_lang),
                             data_dir=data.data_dir or None)

    def check_test_split(self) -> None:
        """The test split's files exist (found without reading them)."""
        data = self.data
        if data.test_split and data.corpus != "synthetic":
            from aiayn.data.corpus import resolve_source

            resolve_source(data.corpus, data.test_split, (data.src_lang, data.tgt_lang), data.data_dir or None)

    def task_info(self) -> dict:
        return {"languages": [self.data.src_lang, self.data.tgt_lang]}

    def scores(self, hyps: list[str], examples: Examples) -> dict[str, float]:
        from aiayn import metrics

        return {"bleu": metrics.bleu(hyps, examples.tgt).score}

    def report(self, hyps: list[str], examples: Examples) -> dict:
        from aiayn import metrics

        score = metrics.bleu(hyps, examples.tgt)
        return {"bleu": score.score, "detail": score.detail, "signature": score.signature}


def read_text(data: DataConfig, split: str, seed: int) -> Examples:
    """Raw sentence pairs of `split`: the corpus' text, or the synthetic task's."""
    if data.corpus == "synthetic":
        from aiayn.data.synthetic import synthetic_pairs

        n, offset = (data.n_train, 0) if split == data.train_split else (data.n_valid, 1 if split == data.valid_split else 2)
        pairs = synthetic_pairs(data.task, n, seed=seed + offset, n_symbols=data.n_symbols,
                                min_len=data.min_len, max_len=data.max_len)
        return Examples([s for s, _ in pairs], [[t] for _, t in pairs])
    from aiayn.data.corpus import read_corpus

    corpus = read_corpus(data.corpus, split=split, langs=(data.src_lang, data.tgt_lang), data_dir=data.data_dir or None)
    return Examples(list(corpus.src), [[t] for t in corpus.tgt])
