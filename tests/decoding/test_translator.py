import json
import logging
import math
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from aiayn.config import EOS_ID, DecodeConfig, SamplingConfig, TransformerConfig
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers
from aiayn.decoding import beam_search, encode_source, greedy_search, pad_sources
from aiayn.models import load_model
from aiayn.models.transformer import Transformer
from aiayn.decoding.streaming import stream_search
from aiayn.decoding.translator import Translator

from fake_decoder import A, B_, C, FakeModel

SYMBOLS = [chr(ord("a") + i) for i in range(12)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    tok = SymbolTokenizer(SYMBOLS)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=tok.vocab_size)).eval()
    path = tmp_path_factory.mktemp("model")
    model.save_pretrained(path)
    save_tokenizers(TokenizerPair.shared(tok), path)
    return path


SENTENCES = ["a b c", "", "d e f g h i j", "k", "  ", "b b b b"]


def test_matches_the_search_functions_and_keeps_order(model_dir):
    tr = Translator.from_pretrained(model_dir, decode=DecodeConfig(max_len_b=8), batch_tokens=8)
    tok, model = tr.tokenizers.src, tr.model
    out = tr.translate(SENTENCES, beam_size=1)
    beam = tr.translate(SENTENCES, beam_size=3, min_len=2)  # min_len: this untrained model ends at once with beams
    for s, o, bo in zip(SENTENCES, out, beam):
        if not s.strip():
            assert o == "" and bo == ""  # blank lines stay blank, output stays aligned
            continue
        src = pad_sources([encode_source(tok, s)], 0)
        assert o == tok.decode(greedy_search(model, src, 1.0, 8)[0])
        cfg = DecodeConfig(beam_size=3, max_len_b=8, min_len=2)
        assert bo != "" and bo == tok.decode(beam_search(model, src, cfg)[0][0].tokens)
    assert len({bo for bo in beam if bo}) > 1  # each line its own output: order is checked


def test_nbest_with_scores(model_dir):
    tr = Translator.from_pretrained(model_dir)
    out = tr.translate(["a b", ""], beam_size=4, nbest=3, max_len_b=5)
    assert len(out[0]) == 3 and out[1] == [("", 0.0)]
    scores = [s for _, s in out[0]]
    assert scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)


def test_sampling_is_seeded(model_dir):
    tr = Translator.from_pretrained(model_dir)
    run = lambda seed: tr.translate(SENTENCES, method="sample", seed=seed, max_len_b=6)  # noqa: E731
    assert run(1) == run(1) and run(1) != run(2)  # the seed is used, not a fixed one


class FakeTranslationModel(FakeModel):
    """`FakeModel`'s hand-set probabilities behind what a `Translator` asks of a model."""

    def __init__(self, table, vocab: int):
        super().__init__(table, vocab=vocab)
        self.config = TransformerConfig.preset("tiny", src_vocab_size=vocab)
        self.max_input_length = 64
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # the Translator reads its device from a parameter

    def eval(self):
        return self

    def parameters(self):
        return iter([self.anchor])


# The first token is a .5, b .3, c .2; after "a", another "a" .25 or the end .75; after "b" or "c", the end.
SAMPLED = {(A,): {A: 0.25, EOS_ID: 0.75}}
TEXT_PROBS = {"a": 0.5 * 0.75, "a a": 0.5 * 0.25, "b": 0.3, "c": 0.2}


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_seeded_samples_follow_the_model_probabilities(temperature):
    """N lines, each drawn from its own generator (seed, line number): the frequency of each output
    is within 4.5 standard errors (sqrt(p(1-p)/N), at most 0.008 for N = 4000) of its probability.
    A correct sampler misses that band with probability under 1e-5 per output; the seed makes the
    draw fixed, so the test is deterministic. Temperature 2 samples from p^(1/2), renormalised."""
    def tempered(dist):
        weights = {t: p ** (1 / temperature) for t, p in dist.items()}
        return {t: w / sum(weights.values()) for t, w in weights.items()}

    table = {(): tempered({A: 0.5, B_: 0.3, C: 0.2}), **{k: tempered(v) for k, v in SAMPLED.items()}}
    expected = {"a": table[()][A] * table[(A,)][EOS_ID], "a a": table[()][A] * table[(A,)][A],
                "b": table[()][B_], "c": table[()][C]}
    if temperature == 1.0:
        assert expected == pytest.approx(TEXT_PROBS)
    model = FakeTranslationModel({(): {A: 0.5, B_: 0.3, C: 0.2}, **SAMPLED}, vocab=len(SYMBOLS) + 4)
    tr = Translator(model, TokenizerPair.shared(SymbolTokenizer(SYMBOLS)))
    n = 4000
    out = tr.translate(["a"] * n, method="sample", seed=11, temperature=temperature, max_len_b=3)
    assert set(out) <= set(expected)
    for text, p in expected.items():
        assert abs(out.count(text) / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n), text
    assert tr.translate(["a"] * n, method="sample", seed=11, temperature=temperature, max_len_b=3) == out


@pytest.mark.parametrize("kwargs", [{"method": "greedy", "nbest": 1}, {"method": "sample", "nbest": 2},
                                    {"beam_size": 1, "nbest": 1}, {"beam_size": 2, "nbest": 3}])
def test_nbest_needs_beam_search(model_dir, kwargs):
    """Greedy and sampled outputs have no scored n-best list: refused, not given a score of 0."""
    tr = Translator.from_pretrained(model_dir)
    with pytest.raises(ValueError, match=f"nbest {kwargs['nbest']} needs beam search with beam_size >= "):
        tr.translate(["a b"], max_len_b=3, **kwargs)


def test_seeded_sample_depends_only_on_seed_and_line_number(model_dir):
    tr = Translator.from_pretrained(model_dir)
    run = lambda lines, first=0: tr.translate(lines, method="sample", seed=5, max_len_b=6,  # noqa: E731
                                              first_index=first)
    together = run(SENTENCES)
    assert [run([s], i)[0] for i, s in enumerate(SENTENCES)] == together  # alone, with its line number
    assert run(SENTENCES[:3]) + run(SENTENCES[3:], 3) == together  # in chunks
    assert run(SENTENCES[:3], 1) != together[:3]  # other line numbers, other samples


def test_overlong_truncated_with_warning_and_unknown_symbols(model_dir, caplog):
    tr = Translator.from_pretrained(model_dir, max_input_tokens=4)
    with caplog.at_level(logging.WARNING):
        out = tr.translate(["a b c d e f g", "zz ? a"], beam_size=1, max_len_b=3)
    assert any("truncated" in r.message for r in caplog.records)
    assert len(out) == 2 and all(isinstance(o, str) for o in out)
    assert tr.translate(["a b c"], beam_size=1, max_len_b=3) == out[:1]  # same first 3 tokens + EOS


def test_progress_counts_every_sentence(model_dir):
    seen = []
    Translator.from_pretrained(model_dir, batch_tokens=6).translate(SENTENCES, beam_size=1, max_len_b=2,
                                                                    progress=seen.append)
    assert sum(seen) == len(SENTENCES)


def test_bad_model_dirs(tmp_path, model_dir):
    with pytest.raises(FileNotFoundError, match="not found"):
        Translator.from_pretrained(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="config.json"):
        Translator.from_pretrained(tmp_path)
    Transformer(TransformerConfig.preset("tiny", src_vocab_size=30)).save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="tokenizer"):
        Translator.from_pretrained(tmp_path)
    save_tokenizers(TokenizerPair.shared(SymbolTokenizer(SYMBOLS)), tmp_path)
    with pytest.raises(ValueError, match="16 tokens but the model expects 30"):
        Translator.from_pretrained(tmp_path)


def test_source_convention_is_ids_then_eos(caplog):
    from aiayn.config import EOS_ID
    from aiayn.decoding import source_ids

    tok = SymbolTokenizer(SYMBOLS)
    assert encode_source(tok, "a b c") == tok.encode("a b c") + [EOS_ID]
    assert encode_source(tok, "") == [EOS_ID]
    assert encode_source(tok, "a b c d", max_len=3) == tok.encode("a b") + [EOS_ID]
    assert encode_source(tok, "a b c d", max_len=3, keep="end") == tok.encode("c d") + [EOS_ID]
    assert source_ids([7, 8, 9], max_len=2) == [7, EOS_ID]
    assert source_ids([7, 8, 9], max_len=2, keep="end") == [9, EOS_ID]
    assert source_ids([7, 8], max_len=5, keep="end") == [7, 8, EOS_ID]
    with pytest.raises(ValueError):
        source_ids([7], max_len=0)


OLD_FORMAT = Path(__file__).resolve().parents[1] / "fixtures" / "model-da27d8d.json"  # layout, no weights


@pytest.fixture(scope="module")
def old_model_dir(tmp_path_factory):
    """A model directory in the format main wrote at da27d8d: its config.json exactly (no model_type;
    pad/bos/eos ids as fields) and weights under the tensor names and shapes recorded from that code.
    Returns (directory, the in-memory model the weights came from)."""
    from safetensors.torch import save_model

    from aiayn.data.synthetic import symbols

    old = json.loads(OLD_FORMAT.read_text())
    config = {k: v for k, v in old["config"].items() if k not in ("pad_id", "bos_id", "eos_id")}
    torch.manual_seed(3)
    model = Transformer(TransformerConfig(**config)).eval()
    path = tmp_path_factory.mktemp("old-model")
    save_model(model, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(old["config"], indent=2))
    save_tokenizers(TokenizerPair.shared(SymbolTokenizer(symbols(10))), path)
    return path, model


def test_concurrent_translate_calls_equal_the_same_calls_made_alone(old_model_dir):
    """8 threads share one Translator (and its FastDecoder), each with batches of other lengths and
    padding; every output equals the output of the same call made alone."""
    tr = Translator.from_pretrained(old_model_dir[0], decode=DecodeConfig(max_len_b=8))
    rng = random.Random(0)
    letters = "abcdefghij"
    jobs = []
    for t in range(8):
        sentences = [" ".join(rng.choice(letters) for _ in range(rng.randint(1, 3 + 2 * t))) for _ in range(3 + t)]
        kwargs = {"method": "greedy"} if t % 2 else {"beam_size": 2 + t % 3, "nbest": 1 + t // 4}
        jobs.append((sentences, kwargs))
    alone = [tr.translate(s, **kw) for s, kw in jobs]
    barrier = threading.Barrier(len(jobs))

    def work(i: int):
        sentences, kwargs = jobs[i]
        barrier.wait()  # start together
        return [tr.translate(sentences, **kwargs) for _ in range(3)]

    with ThreadPoolExecutor(len(jobs)) as pool:
        together = list(pool.map(work, range(len(jobs))))
    for i, runs in enumerate(together):
        for out in runs:
            assert out == alone[i], f"thread {i}"


def test_model_directory_saved_before_model_type_existed_translates_identically(old_model_dir):
    """The da27d8d format (no model_type, pad/bos/eos ids in config.json) loads as the encoder-decoder,
    its tensor names and shapes are the ones this code saves, and it translates as the model it came from."""
    from safetensors import safe_open

    path, original = old_model_dir
    old = json.loads(OLD_FORMAT.read_text())
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        assert {k: list(f.get_slice(k).get_shape()) for k in f.keys()} == old["tensors"]
    tr = Translator.from_pretrained(path)
    assert isinstance(tr.model, Transformer) and "model_type" not in old["config"]
    sentences = ["a b c d", "j i h g f e d c b a", "c", "a a b b c c d d e e"]
    reference = Translator(original, tr.tokenizers)
    assert tr.translate(sentences, method="greedy", max_len_b=6) == reference.translate(sentences, method="greedy", max_len_b=6)
    for got, want in zip(tr.translate(sentences, nbest=2, max_len_b=6), reference.translate(sentences, nbest=2, max_len_b=6)):
        assert [h for h, _ in got] == [h for h, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)


@pytest.mark.parametrize("options", [{}, {"quantize": "int8"}, {"precision": "bf16"}, {"min_len": 4}],
                         ids=["fp32", "int8", "bf16", "min_len"])
@pytest.mark.parametrize("nbest", [None, 2])
def test_continuous_session_answers_what_translate_answers(model_dir, nbest, options):
    # Requests join at different steps (one while others run, one with only blank lines); each
    # comes back when all its texts end, with exactly what translate gives for it, in every precision,
    # and with a minimum length (this model ends at once where it may: each sentence counts its own steps).
    options = dict(options)
    min_len = options.pop("min_len", 0)
    tr = Translator.from_pretrained(model_dir, decode=DecodeConfig(max_len_b=8, min_len=min_len), **options)
    requests = {"r0": SENTENCES[:3], "r1": ["k k k k k k"], "r2": ["", " "], "r3": SENTENCES[3:]}
    session = tr.continuous(nbest=nbest, beam_size=3)
    got, step = {}, 0
    while step < 3 or len(session):
        for name in list(requests)[step:step + 1]:
            session.add(name, requests[name])
        got.update(session.step())
        step += 1
        assert step < 100, "the session never ran dry"  # fail, do not hang (the limit is 8 tokens)
    for name, texts in requests.items():
        want = tr.translate(texts, nbest=nbest, beam_size=3)
        if nbest is None:
            assert got[name] == want, name
            continue
        for g, w in zip(got[name], want, strict=True):  # the same texts; scores up to float rounding
            assert [t for t, _ in g] == [t for t, _ in w], name
            # bf16 matmuls round differently as the batch's rows change (by how much depends on the CPU's
            # kernels: 2e-3 on an AVX2-only EPYC, where bf16 is emulated): bf16 keeps 8 bits, about 0.4%
            assert [s for _, s in g] == pytest.approx([s for _, s in w], abs=1e-2 if options.get("precision") else 1e-5)
    assert tr.continuous(beam_size=1) is None and tr.continuous(method="sample") is None  # whole calls do those
    if min_len:  # not vacuous: this model, free to end, ends every sentence at once
        texts = [t for ts in requests.values() for t in ts if t.strip()]
        assert all(len(out.split()) >= min_len for out in tr.translate(texts, beam_size=3))
        assert tr.translate(texts, beam_size=3, min_len=0) == [""] * len(texts)


def test_a_cancelled_request_is_never_answered_and_the_others_are_as_alone(model_dir):
    tr = Translator.from_pretrained(model_dir, decode=DecodeConfig(max_len_b=8))
    requests = {"r0": SENTENCES[:3], "gone": SENTENCES[3:], "blank": [""], "r1": ["k k k k k k"]}
    session = tr.continuous(beam_size=3)
    for name, texts in requests.items():
        session.add(name, texts)
    got = dict(session.step())  # "blank" comes back at the first step; the others are searching
    searching = [t for t in requests["gone"] if t.strip()]  # a blank text never enters the search
    assert session.cancel("gone") == len(searching) > 0 and session.cancel("blank") == 0 and len(session) == 2
    while len(session):
        got.update(session.step())
    assert set(got) == {"r0", "blank", "r1"}
    for name in got:
        assert got[name] == tr.translate(requests[name], beam_size=3), name


# Without a minimum length: "a" (.6 · .7) beats "b" (.4 · .8) and "a a" (.6 · .3). With min_len 2 the end
# is banned at the second step: "a a" (.6 · .3) beats "b c" (.4 · .2), and no output has one token.
ENDS_EARLY = {(): {A: 0.6, B_: 0.4}, (A,): {A: 0.3, EOS_ID: 0.7}, (B_,): {C: 0.2, EOS_ID: 0.8}}


def test_min_len_bans_the_end_in_every_search():
    model = FakeTranslationModel(ENDS_EARLY, vocab=len(SYMBOLS) + 4)
    tr = Translator(model, TokenizerPair.shared(SymbolTokenizer(SYMBOLS)), decode=DecodeConfig(max_len_b=4))
    for options in ({"beam_size": 2}, {"method": "greedy"}):
        assert tr.translate(["a"], **options) == ["a"]
        assert tr.translate(["a"], min_len=2, **options) == ["a a"]
    sampled = tr.translate(["a"] * 200, method="sample", seed=3, min_len=2)
    assert set(sampled) == {"a a", "b c"}
    src = torch.tensor([[A, EOS_ID]])
    assert list(stream_search(model, src, DecodeConfig(method="greedy", min_len=2), SamplingConfig())) == [A, A]
    with pytest.raises(ValueError, match="min_len must be >= 0"):
        DecodeConfig(min_len=-1)


def test_a_min_len_that_no_repeat_1_makes_impossible_is_refused(model_dir):
    """With no_repeat_ngram_size 1 each token comes at most once: a min_len over the vocabulary's tokens
    (besides PAD, BOS, EOS) would leave a step with every token banned (PAD out of greedy, an empty beam)."""
    tr = Translator.from_pretrained(model_dir)
    words = tr.tokenizers.tgt.vocab_size - 3
    for method in ("greedy", "beam", "sample"):
        with pytest.raises(ValueError, match=f"min_len {words + 1} cannot be met with no_repeat_ngram_size 1"):
            tr.translate(["a b"], method=method, min_len=words + 1, no_repeat_ngram_size=1)
    out = tr.translate(["a b"], method="greedy", min_len=words, no_repeat_ngram_size=1, max_len_b=words + 2)[0].split()
    assert len(out) == len(set(out)) >= words - 1  # as many as the vocabulary holds, none twice (UNK decodes blank)


@pytest.mark.parametrize("precision, quantize, chosen", [("fp32", None, "fp32"), ("bf16", None, "bf16"),
                                                          ("fp32", "int8", "int8"), ("auto", "int8", "int8"),
                                                          (None, "int8", "int8"), ("bf16", "int8", None)])
def test_a_precision_beside_int8_is_refused_not_dropped(precision, quantize, chosen):
    from aiayn.decoding.translator import arithmetic

    if chosen is None:
        with pytest.raises(ValueError, match="precision 'bf16' and quantize 'int8' do not go together"):
            arithmetic(precision, quantize)
    else:
        assert arithmetic(precision, quantize) == chosen


def test_an_int8_translator_keeps_no_fp32_model_and_says_what_it_cannot_do(model_dir):
    """Its decoder holds int8 copies of every weight it reads: the fp32 model is let go, so there is
    nothing to refresh from and no fp32 attention to draw; each is a clear error, not an AttributeError."""
    from aiayn.tasks import load_pipeline

    tr = Translator.from_pretrained(model_dir, quantize="int8")
    held = load_model(model_dir)  # the same weights, held by the caller: nothing to let go
    kept = Translator(held, tr.tokenizers, quantize="int8")
    assert tr.model is None and kept.model is None and held.encoder.embed.weight.dtype == torch.float32
    assert tr.translate(SENTENCES, nbest=2) == kept.translate(SENTENCES, nbest=2)
    with pytest.raises(ValueError, match="keeps only its int8 weights"):
        tr.refresh()
    with pytest.raises(ValueError, match="attention weights need the model's fp32 weights"):
        load_pipeline(model_dir, quantize="int8").attention("a b c")
