"""Several model directories behind one server (issue 30, item 1): a multilingual model (en -> de,
fr, cs, its target tagged on the source) beside a de -> en model; LibreTranslate's /languages and
/translate over all of them, deep-translator as the client; other tasks on their own routes."""

import dataclasses

import pytest
import torch

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the test extra)")

from fastapi.testclient import TestClient  # noqa: E402

from aiayn.config import DecodeConfig, TransformerConfig  # noqa: E402
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers  # noqa: E402
from aiayn.models import Transformer  # noqa: E402
from aiayn.serve.app import create_app  # noqa: E402
from aiayn.model_dir import write_task_info  # noqa: E402
from tiny_models import WORDS, tiny_model  # noqa: E402

TAGS = ["<2de>", "<2fr>", "<2cs>"]
SENTENCE = "a b c d"


ANSWER = {"de": "a", "fr": "b", "cs": "c"}  # what the trained tiny model says for each target, whatever the sentence


def multilingual_model(directory):
    """A tiny model as the multilingual recipe leaves it (tags in the vocabulary, its directions in
    task.json), trained here in a second to answer each target's tag with its own word (`ANSWER`)."""
    from aiayn.config import BOS_ID, EOS_ID, PAD_ID

    torch.manual_seed(0)
    tok = SymbolTokenizer(WORDS + TAGS)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=tok.vocab_size))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    targets = list(ANSWER)
    for _ in range(80):
        picks = torch.randint(0, 3, (32,)).tolist()
        src = torch.tensor([tok.encode(f"<2{targets[i]}> " + " ".join(WORDS[j] for j in torch.randint(0, 12, (4,))))
                            + [EOS_ID] for i in picks])  # (32, 6)
        answer = torch.tensor([tok.encode(ANSWER[targets[i]]) for i in picks])  # (32, 1)
        tgt_in = torch.cat([torch.full_like(answer, BOS_ID), answer], 1)
        tgt_out = torch.cat([answer, torch.full_like(answer, EOS_ID)], 1)
        loss = torch.nn.functional.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval().save_pretrained(directory)
    save_tokenizers(TokenizerPair.shared(tok), directory)
    decode = dataclasses.asdict(DecodeConfig(method="greedy", max_len_a=0.0, max_len_b=5))
    write_task_info(directory, {"task": "translation", "decode": decode, "languages": ["en", "de"],
                                "target_tag": "<2{}>", "directions": [["en", t] for t in ("de", "fr", "cs")]})
    return directory


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("directions")
    return {"multi": multilingual_model(root / "multi"), "de-en": tiny_model(root / "de-en", "translation"),
            "lm": tiny_model(root / "lm", "lm"), "qa": tiny_model(root / "qa", "qa")}


def expected(directory, source: str) -> str:
    from aiayn.decoding.translator import Translator

    return Translator.from_pretrained(directory).translate([source], method="greedy", max_len_a=0.0, max_len_b=5)[0]


def test_deep_translator_translates_into_de_fr_and_cs_through_one_server(dirs, live_server):
    pytest.importorskip("deep_translator", reason="the test extra installs deep-translator")
    from deep_translator import LibreTranslator

    url = live_server(create_app([dirs["multi"], dirs["de-en"]]))  # each model in a worker process of its own
    got = {}
    for target in ("de", "fr", "cs"):
        # deep-translator's own list of LibreTranslate languages lacks Czech, and its constructor refuses a
        # code not listed; its public `target` setter takes any code, as a LibreTranslate server does
        translator = LibreTranslator(source="en", target="de", api_key="x", custom_url=f"{url}/")
        translator.target = target
        got[target] = translator.translate(SENTENCE)
    want = {target: expected(dirs["multi"], f"<2{target}> {SENTENCE}") for target in ("de", "fr", "cs")}
    assert got == want == ANSWER  # the tag steers this model: a router that forgot it would fail
    back = LibreTranslator(source="de", target="en", api_key="x", custom_url=f"{url}/").translate(SENTENCE)
    assert back == expected(dirs["de-en"], SENTENCE)


def test_languages_lists_every_pair_and_an_unserved_pair_is_a_400_listing_them(dirs):
    app = create_app([dirs["multi"], dirs["de-en"]], batching=_thread())
    with TestClient(app) as client:
        assert client.get("/languages").json() == [{"code": "en", "name": "en", "targets": ["de", "fr", "cs"]},
                                                   {"code": "de", "name": "de", "targets": ["en"]}]
        response = client.post("/translate", json={"q": SENTENCE, "source": "fr", "target": "de"})
        assert response.status_code == 400
        assert "en -> de, en -> fr, en -> cs, de -> en" in response.json()["error"]
        auto = client.post("/translate", json={"q": SENTENCE, "source": "auto", "target": "cs"})
        assert auto.json() == {"translatedText": expected(dirs["multi"], f"<2cs> {SENTENCE}")}
        native = client.post("/v1/translate", json={"text": [SENTENCE], "method": "greedy", "target": "fr"})
        assert native.json()["translations"][0]["text"] == expected(dirs["multi"], f"<2fr> {SENTENCE}")
        assert client.get("/health").json()["languages"] == [["en", "de"], ["en", "fr"], ["en", "cs"], ["de", "en"]]


def test_other_tasks_are_served_beside_on_their_own_routes(dirs):
    with TestClient(create_app([dirs["de-en"], dirs["lm"], dirs["qa"]], batching=_thread())) as client:
        assert client.post("/translate", json={"q": SENTENCE, "source": "de", "target": "en"}).status_code == 200
        assert client.post("/v1/generate", json={"prompt": "a b", "max_new_tokens": 3}).status_code == 200
        assert client.post("/v1/answer", json={"context": "a b", "question": "c"}).status_code == 200
        models = client.get("/health").json()["models"]
        assert [m["task"] for m in models] == ["translation", "lm", "qa"]


def test_two_directories_of_one_route_without_languages_are_refused(dirs, tmp_path):
    other = tiny_model(tmp_path / "lm2", "lm")
    with pytest.raises(ValueError, match="/v1/generate is a route of both"):
        create_app([dirs["lm"], other], batching=_thread())


def test_two_directories_of_one_pair_or_one_directory_twice_are_refused(dirs, tmp_path):
    """A de->en request could reach only the first of two de->en directories; a directory named twice
    would hide its own counts under one label."""
    other = tiny_model(tmp_path / "de-en2", "translation")
    with pytest.raises(ValueError, match="both translate de->en"):
        create_app([dirs["de-en"], other], batching=_thread())
    with pytest.raises(ValueError, match="one model directory given twice"):
        create_app([dirs["de-en"], f"{dirs['de-en']}/"], batching=_thread())


def _thread():
    from aiayn.serve.batcher import BatchConfig

    return BatchConfig(worker="thread")
