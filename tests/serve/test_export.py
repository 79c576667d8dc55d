"""`aiayn export ctranslate2` and `aiayn serve --backend ctranslate2`: the exported model decodes as
aiayn's own `Translator` does (the independent reference), post-norm and pre-norm; bad inputs are
errors naming the file; the server answers the same with either backend."""

import dataclasses
import json
import sys

import pytest
import torch

pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e '.[ct2]'")

from aiayn import cli  # noqa: E402
from aiayn.config import BOS_ID, EOS_ID, PAD_ID, DecodeConfig, TransformerConfig  # noqa: E402
from aiayn.data.synthetic import symbols  # noqa: E402
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers  # noqa: E402
from aiayn.export import MANIFEST, export_ctranslate2  # noqa: E402
from aiayn.export.ct2_translator import CT2Translator  # noqa: E402
from aiayn.models import RNNConfig, RNNEncoderDecoder, Transformer  # noqa: E402
from aiayn.tasks import load_pipeline  # noqa: E402

TEXTS = ["a b c d", "", "e f g h i j c", "zz a", "j i h g f e d c b a a b"]  # a blank line, an unknown symbol
GREEDY = dict(method="greedy", max_len_a=1.0, max_len_b=5)
BEAM = dict(method="beam", beam_size=4, max_len_a=0.5, max_len_b=6)


def make_model_dir(directory, seed: int = 0, eos_weight: float = 0.0, **config):
    """A tiny random Transformer with a 10-symbol vocabulary, announcing the pair de -> en.
    `eos_weight` > 0 raises EOS's logit by about eos_weight · 0.1 · D (see `never_pad_or_bos`)."""
    torch.manual_seed(seed)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=14, **config))
    never_pad_or_bos(model)
    if eos_weight:
        with torch.no_grad():
            model.decoder.embed.weight[EOS_ID] = eos_weight
    model.save_pretrained(directory)
    save_tokenizers(TokenizerPair.shared(SymbolTokenizer(symbols(10))), directory)
    decode = dataclasses.asdict(DecodeConfig(max_len_a=0.0, max_len_b=6))
    (directory / "task.json").write_text(json.dumps({"task": "translation", "languages": ["de", "en"],
                                                     "decode": decode}))
    return directory


@torch.no_grad()
def never_pad_or_bos(model) -> None:
    """Give PAD and BOS a logit of -D whatever the input, as a trained model gives them no probability.
    Both searches ban them; CTranslate2 before the softmax, aiayn after, so on random weights the
    other tokens' log-probabilities would differ by log(1 - p(PAD) - p(BOS)). The last norm's output
    is x̂·γ + β with x̂ of mean 0, so with β = 0.1 a row of -10s scores -10·0.1·D."""
    last = model.decoder.final_norm or model.decoder.layers[-1].ff_conn.norm
    last.bias.fill_(0.1)
    out = model.output_proj.weight if model.output_proj is not None else model.decoder.embed.weight
    out[[PAD_ID, BOS_ID]] = -10.0


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def exported(model_dir, tmp_path_factory):
    return export_ctranslate2(model_dir, tmp_path_factory.mktemp("export") / "ct2")


def both(model_dir, export_dir):
    """aiayn's Translator and the export's, each set up by its directory's task.json, as the server does."""
    return load_pipeline(model_dir).translator, CT2Translator.from_pretrained(export_dir)


def assert_same_nbest(ours, theirs):
    for mine, other in zip(ours, theirs):
        assert [t for t, _ in mine] == [t for t, _ in other]
        assert [s for _, s in mine] == pytest.approx([s for _, s in other], rel=1e-3)


def test_float32_decodes_as_aiayn(model_dir, exported):
    native, ct2 = both(model_dir, exported)
    assert ct2.translate(TEXTS, **GREEDY) == native.translate(TEXTS, **GREEDY)
    for form, alpha in (("gnmt", 0.6), ("plain", 1.0), ("gnmt", 0.0)):
        options = dict(BEAM, length_penalty=alpha, length_penalty_form=form)
        assert_same_nbest(native.translate(TEXTS, nbest=3, **options), ct2.translate(TEXTS, nbest=3, **options))
    assert ct2.translate(TEXTS) == native.translate(TEXTS)  # task.json's defaults
    sampled = ct2.translate(TEXTS, **dict(GREEDY, method="sample", top_k=1, temperature=0.5))  # top-1: greedy
    assert sampled == native.translate(TEXTS, **GREEDY)
    with pytest.raises(ValueError, match="seeded sampling is not available"):
        ct2.translate(TEXTS, method="sample", seed=1)
    with pytest.raises(ValueError, match="nbest 2 needs beam search"):
        ct2.translate(TEXTS, nbest=2, method="greedy")


def test_no_repeat_ngram_size_passes_to_ctranslate2(model_dir, exported):
    # CTranslate2 bans the tokens before its softmax, aiayn (as fairseq and Hugging Face) after it: the
    # argmax is the same, but beam scores differ, so beam outputs are only checked against the rule
    native, ct2 = both(model_dir, exported)
    greedy, beam = dict(GREEDY, max_len_b=12), dict(BEAM, max_len_b=12)
    ours = native.translate(TEXTS, no_repeat_ngram_size=2, **greedy)
    assert ours != native.translate(TEXTS, **greedy)  # the random model repeats itself: the option is exercised
    assert ct2.translate(TEXTS, no_repeat_ngram_size=2, **greedy) == ours
    repeated = ct2.translate(TEXTS, **beam)
    for text in (repeated, ct2.translate(TEXTS, no_repeat_ngram_size=2, **beam)):
        bigrams = [list(zip(t.split(), t.split()[1:])) for t in text]
        assert any(len(set(b)) < len(b) for b in bigrams) == (text is repeated)


def test_min_len_passes_to_ctranslate2(tmp_path):
    model_dir = make_model_dir(tmp_path / "model", eos_weight=1.0)  # ends its outputs early
    native, ct2 = both(model_dir, export_ctranslate2(model_dir, tmp_path / "ct2"))
    for options in (GREEDY, BEAM):
        free, at_least_3 = native.translate(TEXTS, **options), native.translate(TEXTS, min_len=3, **options)
        assert any(len(text.split()) < 3 for text in free)  # the option is exercised
        assert all(len(text.split()) >= 3 for text, source in zip(at_least_3, TEXTS) if source.strip())
        assert ct2.translate(TEXTS, min_len=3, **options) == at_least_3


def test_pre_norm_and_separate_vocabularies_decode_as_aiayn(tmp_path):
    for name, config in (("pre", {"norm_first": True}), ("sep", {"tgt_vocab_size": 14, "share_embeddings": False,
                                                                   "tie_output": False})):
        model_dir = make_model_dir(tmp_path / name, seed=1, **config)
        native, ct2 = both(model_dir, export_ctranslate2(model_dir, tmp_path / f"{name}-ct2"))
        assert ct2.translate(TEXTS, **GREEDY) == native.translate(TEXTS, **GREEDY)
        assert_same_nbest(native.translate(TEXTS, nbest=2, **BEAM), ct2.translate(TEXTS, nbest=2, **BEAM))


def test_int8_stores_the_same_weights_smaller(model_dir, exported, tmp_path):
    # int8 arithmetic on this 32-wide random model changes its outputs (BLEU on a real model:
    # benchmarks/export_bleu.py), so the stored weights are checked by computing with them in float32
    out = export_ctranslate2(model_dir, tmp_path / "int8", quantization="int8")
    assert json.loads((out / MANIFEST).read_text())["quantization"] == "int8"
    native, ct2 = load_pipeline(model_dir).translator, CT2Translator.from_pretrained(out, compute_type="float32")
    assert ct2.translate(TEXTS, **GREEDY) == native.translate(TEXTS, **GREEDY)
    assert ct2.translate(TEXTS, **BEAM) == native.translate(TEXTS, **BEAM)  # (rounded weights reorder near-ties lower)
    assert (out / "model.bin").stat().st_size < (exported / "model.bin").stat().st_size


def test_errors_name_the_file(model_dir, tmp_path, monkeypatch):
    rnn = tmp_path / "rnn"
    RNNEncoderDecoder(RNNConfig(src_vocab_size=14, embed_dim=8, hidden_size=8)).save_pretrained(rnn)
    with pytest.raises(ValueError, match=f"{rnn / 'config.json'}.*only the Transformer encoder-decoder"):
        export_ctranslate2(rnn, tmp_path / "out")
    for name, setting, what in [("from-end", {"source_positions": "end"}, "counted from the end"),
                                ("copies", {"copy_attention": True}, "copy attention has no CTranslate2"),
                                ("sentences", {"source_units": "sentences", "sentence_ends": (5,)},
                                 "sentences as source units has no CTranslate2")]:
        unsupported = make_model_dir(tmp_path / name, **setting)
        with pytest.raises(ValueError, match=f"{unsupported / 'config.json'}.*{what}"):
            export_ctranslate2(unsupported, tmp_path / "out")
    with pytest.raises(ValueError, match=f"{model_dir}.*unknown quantization 'int4'"):
        export_ctranslate2(model_dir, tmp_path / "out", quantization="int4")
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'missing'}: model directory not found"):
        export_ctranslate2(tmp_path / "missing", tmp_path / "out")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="busy: exists and is not an export directory"):
        export_ctranslate2(model_dir, tmp_path / "busy")
    with pytest.raises(FileNotFoundError, match=f"{model_dir / MANIFEST}: not found"):
        CT2Translator.from_pretrained(model_dir)
    assert not (tmp_path / "out").exists() and (tmp_path / "busy" / "notes.txt").is_file()
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if not installed
    with pytest.raises(RuntimeError, match=r"pip install 'aiayn\[ct2\]'"):
        export_ctranslate2(model_dir, tmp_path / "out")


def test_command_writes_the_export_and_reports_errors(model_dir, tmp_path, capsys):
    out = tmp_path / "ct2"
    for _ in range(2):  # a second export replaces the first
        assert cli.main(["export", "ctranslate2", str(model_dir), str(out), "--quantization", "int8_float32"]) == 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert (manifest["quantization"], manifest["languages"], manifest["decode"]["max_len_b"]) == ("int8_float32",
                                                                                                  ["de", "en"], 6)
    assert {"model.bin", "tokenizer.json", "task.json"} <= {p.name for p in out.iterdir()}
    assert [p.name for p in tmp_path.iterdir()] == ["ct2"]  # no temporary directory left behind
    capsys.readouterr()
    assert cli.main(["export", "ctranslate2", str(tmp_path / "missing"), str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"aiayn export: error: {tmp_path / 'missing'}: model directory not found"]


# -- the server ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def clients(model_dir, exported):
    pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
    pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the test extra)")
    from fastapi.testclient import TestClient

    from aiayn.serve.app import create_app
    from aiayn.serve.batcher import BatchConfig

    batching = BatchConfig(max_wait_ms=5)
    with TestClient(create_app(model_dir, batching=batching)) as native, \
            TestClient(create_app(exported, batching=batching, backend="ctranslate2")) as ct2:
        yield native, ct2


def test_server_answers_as_the_native_one(clients):
    native, ct2 = clients
    for body in ({"q": "a b c d", "source": "de", "target": "en"}, {"q": ["a b c d", "e f g"]}):
        answer = ct2.post("/translate", json=body)
        assert answer.status_code == 200 and answer.json() == native.post("/translate", json=body).json()
    body = {"text": ["a b c d", "j i h"], "beam_size": 3, "nbest": 2, "max_len_b": 8}
    mine, theirs = (c.post("/v1/translate", json=body).json()["translations"] for c in (native, ct2))
    assert [t["text"] for t in mine] == [t["text"] for t in theirs]
    assert_same_nbest([[(h["text"], h["score"]) for h in t["hypotheses"]] for t in mine],
                      [[(h["text"], h["score"]) for h in t["hypotheses"]] for t in theirs])
    assert ct2.get("/languages").json() == [{"code": "de", "name": "de", "targets": ["en"]}]
    assert ct2.get("/health").json()["backend"] == "ctranslate2"


def test_server_refuses_attention_with_ctranslate2(clients):
    answer = clients[1].post("/v1/translate", json={"text": ["a b c d"], "return_attention": True})
    assert answer.status_code == 400 and "not available with the ctranslate2 backend" in answer.json()["error"]


def test_native_backend_on_an_export_says_which_backend(exported):
    from aiayn.serve.app import create_app

    with pytest.raises(ValueError, match="--backend ctranslate2"):
        create_app(exported)


def test_long_sources_are_cut_where_the_native_translator_cuts_them(tmp_path):
    """Sinusoidal tables are exported with rows to spare (max_positions + 256); sources are still cut at
    the model's own max_input_length, as natively, so both backends read the same source."""
    model_dir = make_model_dir(tmp_path / "model", seed=2, max_positions=8)
    native, ct2 = both(model_dir, export_ctranslate2(model_dir, tmp_path / "ct2"))
    assert native.max_input_tokens == ct2.max_input_tokens == 8 < ct2.max_positions
    long = [" ".join("abcdefghij"[(i * 3 + j) % 10] for j in range(9 + i)) for i in range(6)]  # 9-14 symbols
    assert_same_nbest(native.translate(long, nbest=2, **BEAM), ct2.translate(long, nbest=2, **BEAM))
