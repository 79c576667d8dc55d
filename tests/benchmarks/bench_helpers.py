"""What the benchmark scripts' tests share: where the scripts are, how one runs, and tiny runs to feed them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def last_json_line(script: str, *args: str) -> dict:
    result = subprocess.run([sys.executable, str(BENCHMARKS / script), *args],
                            capture_output=True, text=True, timeout=300, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def tiny_translation_run(tmp_path: Path, train: str = "max_updates = 2\n", max_len_b: int | None = 4) -> Path:
    """A finished `aiayn train` run of the tiny preset on 60 symbol pairs, with a test split; `train`
    is its [train] section (progress and BLEU validation off). Outputs are cut at the source's length +
    `max_len_b` (None: the defaults'): an untrained model runs to its limit."""
    from aiayn.cli import main

    data = tmp_path / "data"
    data.mkdir()
    lines = [" ".join("abcdef"[(i * 7 + j) % 6] for j in range(1 + i % 5)) for i in range(60)]
    for split in ("train", "val", "test"):
        for lang in ("x", "y"):
            (data / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines))
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(f'[model]\npreset = "tiny"\n[data]\ncorpus = "{data}"\nsrc_lang = "x"\ntgt_lang = "y"\n'
                      'vocab_type = "symbols"\nmax_tokens = 200\ntest_split = "test"\n'
                      f"[train]\n{train}bleu = false\nprogress = false\n"
                      + ("" if max_len_b is None else f"[decode]\nmax_len_a = 1.0\nmax_len_b = {max_len_b}\n"))
    run_dir = tmp_path / "run"
    assert main(["train", str(recipe), "--run-dir", str(run_dir)]) == 0
    return run_dir


def labelled_corpus(tmp_path: Path) -> tuple[Path, list[str], list[str]]:
    """A 40-text SST-like corpus of tiny_models' words: dev.tsv, and train_full.tsv of the same texts."""
    from tiny_models import WORDS

    texts = [" ".join(WORDS[(i * 5 + j) % 12] for j in range(1 + i % 4)) for i in range(40)]
    gold = ["pos" if i % 3 else "neg" for i in range(40)]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in zip(texts, gold)))
    (corpus / "train_full.tsv").write_text("".join(f"{t}\t{y}\n" for t, y in zip(texts, gold)))
    return corpus, texts, gold


def benchmark(name: str):
    """The benchmark script `name` imported as a module (its own imports, e.g. `_common`, resolved)."""
    import importlib

    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


class LetterTokens:
    """A word is one token per letter (ids 1-26): words of several tokens, as subwords make."""

    def encode_batch(self, words):
        return [[ord(c) - ord("a") + 1 for c in word] for word in words]


def tiny_encoder():
    from aiayn.models.encoder_only import EncoderOnly, EncoderOnlyConfig

    torch.manual_seed(0)
    return EncoderOnly(EncoderOnlyConfig(vocab_size=30, d_model=16, n_heads=2, n_layers=1, d_ff=32, n_classes=2,
                                         dropout=0.0)).eval()
