"""The web page (`serve/static/index.html`) of every task's server in Chromium: each form asks the model's own
route, and a server of several models reaches each model and each language pair."""

import json
import re
from urllib.parse import urlsplit

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the test extra)")

from fastapi.testclient import TestClient  # noqa: E402

from aiayn.serve.app import create_app  # noqa: E402


IMAGE = [[0.0, 0.25, 0.5, 0.75]] * 4


PAGE = {  # task -> (what is typed in which box, the request the page should send)
    "summarization": ({"text": "a b c d"}, {"text": "a b c d"}),
    "qa": ({"context": "a b c", "question": "d"}, {"context": "a b c", "question": "d"}),
    "lm": ({"prompt": "a b"}, {"prompt": "a b", "stream": True}),  # streamed: see test_streaming.py
    "classify": ({"text": "a b c"}, {"text": "a b c"}),
    "image-classify": ({"image": json.dumps(IMAGE)}, {"image": IMAGE}),
}


def shown(answer: dict) -> str:
    """What the page shows of an answer: its first output's text, or its label and probability."""
    output = next(iter(answer.values()))
    output = output[0] if isinstance(output, list) else output
    return output if isinstance(output, str) else f"{output['label']} (probability {output['probability']:.3f})"


@pytest.mark.parametrize("task", list(PAGE))
def test_the_web_page_asks_the_models_own_route(task_dirs, live_server, chromium, task):
    typed, sent = PAGE[task]
    url = live_server(create_app(task_dirs[task]))
    route = TestClient(create_app(task_dirs[task])).get("/health").json()["forms"][0]["path"]
    page = chromium.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url + "/")
        for box, text in typed.items():
            page.fill(f"#{box}", text)
        with page.expect_response(lambda r: r.request.method == "POST", timeout=30_000) as answered:
            page.click("#translate")
        response = answered.value
        assert (urlsplit(response.url).path, response.status) == (route, 200)
        assert response.request.post_data_json == sent
        if response.headers["content-type"].startswith("text/event-stream"):  # the last event holds the whole text
            # which may be empty: the test's tiny model samples, and may end at once
            last = json.loads(response.text().strip().split("\n")[-1][len("data: "):])
            # a continuation starts with the space that follows the prompt: the page need not show it
            page.wait_for_function("want => document.getElementById('output').innerText.trim() === want.trim()",
                                   arg=last["text"])
            assert page.inner_text("#output").strip() == last["text"].strip()
        else:
            page.locator("#output").filter(has_text=re.compile(r"\S")).wait_for(timeout=30_000)
            assert page.inner_text("#output") == shown(response.json())
        assert page.locator("#controls").is_hidden() and page.inner_text("#error") == "" and not errors
    finally:
        page.close()


def test_the_web_page_of_several_models_reaches_each_and_each_language_pair(tmp_path, live_server, chromium):
    """A server of a multilingual model and a language model: the page offered only the first model's form,
    and posted without source and target (every text came out in the first target)."""
    from tiny_models import tiny_model

    multi = tiny_model(tmp_path / "multi", "translation", target_tag="<2{}>",
                       directions=[["en", "de"], ["en", "fr"], ["en", "cs"]])
    url = live_server(create_app([multi, tiny_model(tmp_path / "lm", "lm")]))
    page = chromium.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url + "/")
        page.locator("#pair").wait_for()
        assert page.locator("#form option").all_inner_texts() == ["translation: POST /v1/translate",
                                                                   "lm: POST /v1/generate"]
        assert page.locator("#pair option").all_inner_texts() == ["en → de", "en → fr", "en → cs"]
        page.select_option("#pair", "en fr")
        page.fill("#text", "a b")
        with page.expect_response(lambda r: r.request.method == "POST", timeout=30_000) as answered:
            page.click("#translate")
        sent = answered.value.request.post_data_json
        assert (sent["source"], sent["target"], answered.value.status) == ("en", "fr", 200)
        page.select_option("#form", "1")  # the language model's form
        assert page.locator("#prompt").count() == 1 and page.locator("#pair").count() == 0
        page.fill("#prompt", "a b")
        with page.expect_response(lambda r: r.request.method == "POST", timeout=30_000) as answered:
            page.click("#translate")
        assert urlsplit(answered.value.url).path == "/v1/generate" and answered.value.status == 200
        assert not errors
    finally:
        page.close()
