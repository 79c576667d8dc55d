"""`aiayn prepare`: train the subword vocabulary of a corpus and cache its tokenized splits."""

from __future__ import annotations

HELP = "train a sentencepiece vocabulary on a corpus' train split and cache the tokenized splits"


def add_arguments(p) -> None:
    from aiayn.training.config import RunConfig

    DataConfig = _data_defaults()

    p.add_argument("corpus", help="known corpus name (multi30k, small-parallel-enja), {split}.{lang} directory, "
                                  "or TSV file")
    p.add_argument("--langs", nargs=2, metavar=("SRC", "TGT"), help="source and target language (names, directories)")
    p.add_argument("--out", required=True, help="model directory that receives tokenizer.json + tokenizer files")
    p.add_argument("--splits", nargs="+", help="splits to tokenize (default: all of a known corpus, else train)")
    p.add_argument("--vocab-size", type=int,
                   help=f"pieces per vocabulary (default: data.vocab_size, {DataConfig.vocab_size})")
    p.add_argument("--model-type", choices=["bpe", "unigram"],
                   help=f"sentencepiece model (default: data.vocab_type, {DataConfig.vocab_type})")
    p.add_argument("--seed", type=int,
                   help=f"vocabulary training seed (default: train.seed, {RunConfig.seed}: the vocabulary `aiayn train` "
                        "would build, so their caches agree)")
    p.add_argument("--separate-vocab", action="store_true", help="one vocabulary per side (default: joint)")
    p.add_argument("--retrain", action="store_true", help="train a new vocabulary even if --out has one")
    p.add_argument("--data-dir", help="local directory holding the corpus (else $AIAYN_DATA_DIR, else download)")
    p.add_argument("--cache-dir", help="downloads + tokenized arrays (default: $AIAYN_CACHE_DIR or ~/.cache/aiayn)")
    p.add_argument("--strict", action="store_true", help="an empty line is an error instead of a counted skip")


def run(args) -> int:
    from pathlib import Path

    from aiayn.data import load_parallel, load_tokenizers, save_tokenizers, train_tokenizers
    from aiayn.data.corpus import stream_corpus
    from aiayn.data.registry import REGISTRY

    out = Path(args.out)
    common = dict(langs=args.langs, data_dir=args.data_dir, cache_dir=args.cache_dir, strict=args.strict)
    if (out / "tokenizer.json").is_file() and not args.retrain:
        given = [flag for flag, value in (("--vocab-size", args.vocab_size), ("--model-type", args.model_type),
                                          ("--seed", args.seed), ("--separate-vocab", args.separate_vocab or None))
                 if value is not None]
        if given:  # they would be ignored
            raise ValueError(f"{' '.join(given)}: settings of a new vocabulary, but {out} holds one; add --retrain "
                             "to replace it, or leave them out to use it")
        tokenizers = load_tokenizers(out)
        print(f"using the existing vocabulary in {out} (--retrain to replace it)")
    else:
        refuse_a_model_dir(out)
        settings = _vocabulary_settings(args)
        train = stream_corpus(args.corpus, split="train", **common)  # read as the vocabulary trains, never whole
        refuse_no_text(train, args.corpus)
        tokenizers = train_tokenizers(*train.sides(), **settings)
        save_tokenizers(tokenizers, out)
        kind = "joint" if tokenizers.joint else "separate"
        print(f"trained {kind} {settings['model_type']} vocabulary ({tokenizers.src.vocab_size} pieces) -> {out}")
    splits = args.splits or (list(REGISTRY[args.corpus].splits) if args.corpus in REGISTRY else ["train"])
    print(f"{'split':<18}{'pairs':>8}{'skipped':>9}{'src tok':>10}{'tgt tok':>10}  cache")
    for split in splits:
        ds = load_parallel(args.corpus, tokenizers, split=split, **common)
        print(f"{split:<18}{len(ds):>8}{ds.stats.n_empty:>9}{int(ds.src_lengths.sum()):>10}"
              f"{int(ds.tgt_lengths.sum()):>10}  {'hit' if ds.from_cache else 'written'}")
    return 0


def _data_defaults():
    from aiayn.tasks import DEFAULT_TASK, task_class

    return task_class(DEFAULT_TASK).data_config  # the [data] settings of a parallel corpus


def _vocabulary_settings(args) -> dict:
    """`train_tokenizers`' settings from the flags; unset ones are `aiayn train`'s, so that their caches agree.
    A flag is checked as the setting it stands for (data.vocab_size, train.seed) is: an error names both."""
    from aiayn.config import ConfigError
    from aiayn.training.config import RunConfig, check_seed

    data = _data_defaults()
    vocab_size = data.vocab_size if args.vocab_size is None else args.vocab_size
    seed = RunConfig.seed if args.seed is None else args.seed
    for flag, check in (("--vocab-size", lambda: data(vocab_size=vocab_size)),
                        ("--seed", lambda: check_seed(seed))):
        try:
            check()
        except ConfigError as e:
            raise ConfigError(f"{flag}: {e}") from None
    return dict(vocab_size=vocab_size, model_type=args.model_type or data.vocab_type,
                joint=not args.separate_vocab, seed=seed)


def refuse_no_text(corpus, source) -> None:
    """A vocabulary is trained on text: a training split without any (empty, or every pair with an empty
    side) is an error naming its file(s)."""
    from aiayn.data.corpus import CorpusError

    src, tgt = corpus.sides()
    if not any(t.strip() for t in src) or not any(t.strip() for t in tgt):
        files = ", ".join(map(str, dict.fromkeys(corpus.files))) or str(source)
        raise CorpusError(f"{files}: no text to train a vocabulary on ({corpus.stats.n_read} lines read, "
                          f"{corpus.stats.n_empty} with an empty side)")


def refuse_a_model_dir(out) -> None:
    """A new vocabulary is never written beside a model's weights: the model reads its ids by it."""
    from aiayn.models import WEIGHTS_FILE, is_model_dir

    if is_model_dir(out) or (out / WEIGHTS_FILE).exists():
        raise FileExistsError(f"{out}: holds a model, whose vocabulary is part of it; prepare into another --out")
