"""`aiayn serve --api-key` (issue 33): every route that runs a model, of every task, answers 403
without the key and 200 with it, however the key is sent; the key never reaches the access log."""

import logging
import re
import urllib.error
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the test extra)")

from fastapi.testclient import TestClient  # noqa: E402

from aiayn.serve.app import ServeLimits, create_app  # noqa: E402
from tiny_models import task_clients  # noqa: E402

KEY = "s3cret-key"
IMAGE = [[0.0, 0.25, 0.5, 0.75]] * 4  # 4x4 pixels: four 2x2 patches
REQUESTS = {  # task -> (path, fields) of every route that runs the model; strings, to be sent as form fields too
    "translation": [("/translate", {"q": "a b c", "source": "de", "target": "en"}),
                    ("/v1/translate", {"text": ["a b c", "d e"], "method": "greedy"})],  # two texts: a list in a form
    "summarization": [("/v1/summarize", {"text": "a b c d"})],
    "qa": [("/v1/answer", {"context": "a b c", "question": "d"})],
    "lm": [("/v1/generate", {"prompt": "a b", "method": "greedy"})],
    "classify": [("/v1/classify", {"text": "a b c"})],
    "embed": [("/v1/embed", {"input": "a b c"})],
    "image-classify": [("/v1/classify", {"image": IMAGE})],  # JSON only: pixel rows are no form field
}


# -- an api_key in the query string is not written to the access log -----------------
@pytest.mark.parametrize("query", [f"api_key={KEY}", f"q=a&api%5Fkey={KEY}&source=de", f"api_key={KEY}&api_key={KEY}"])
def test_the_access_log_hides_an_api_key_sent_in_the_query(task_dirs, live_server, query):
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    access = logging.getLogger("uvicorn.access")
    url = live_server(create_app(task_dirs["translation"], limits=ServeLimits(api_key=KEY)), log_level="info")
    access.addHandler(handler)
    try:
        request = urllib.request.Request(f"{url}/translate?{query}", data=b"", method="POST")
        try:
            urllib.request.urlopen(request, timeout=30).close()
        except urllib.error.HTTPError as e:  # a 422 for the request without q: logged all the same
            e.close()
    finally:
        access.removeHandler(handler)
    assert any("/translate?" in line and "api_key=***" in line.replace("api%5Fkey", "api_key") for line in lines), lines
    assert not any(KEY in line for line in lines), lines


def test_redact_api_key_keeps_the_rest_of_the_path():
    from aiayn.serve.server import redact_api_key

    assert redact_api_key("/translate?q=a%20b&api_key=x&source=de") == "/translate?q=a%20b&api_key=***&source=de"
    assert redact_api_key("/translate?api+key=x&my_api_key=y") == "/translate?api+key=x&my_api_key=y"


# -- --api-key guards every route that runs a model, however the key is sent -----------
ROUTES = [(task, path, fields) for task, requests in REQUESTS.items() for path, fields in requests]
WAYS = ("json body", "form field", "query parameter", "bearer header")


def send(client, path: str, fields: dict, way: str, key):
    """POST `fields` to `path` with the api key `key` (None: no key) sent the `way` named."""
    if key is None:
        return client.post(path, json=fields)
    if way == "json body":
        return client.post(path, json={**fields, "api_key": key})
    if way == "form field":
        return client.post(path, data={**fields, "api_key": key})
    if way == "query parameter":
        return client.post(path, params={"api_key": key}, json=fields)
    return client.post(path, json=fields, headers={"Authorization": f"Bearer {key}"})


@pytest.fixture(scope="module")
def guarded(task_dirs):
    """task -> a TestClient of that task's server started with --api-key KEY."""
    with task_clients(task_dirs, limits=ServeLimits(api_key=KEY)) as clients:
        yield clients


@pytest.mark.parametrize("task,path,fields", ROUTES, ids=[f"{t}{p}" for t, p, _ in ROUTES])
def test_every_model_route_needs_the_key_in_each_of_the_four_ways(guarded, task, path, fields):
    client = guarded[task]
    missing = send(client, path, fields, "", None)
    assert missing.status_code == 403 and "needs an api_key" in missing.json()["error"], missing.text
    for way in WAYS:
        wrong = send(client, path, fields, way, KEY + "x")
        assert wrong.status_code == 403 and wrong.json()["error"] == "invalid api_key", (way, wrong.text)
        right = send(client, path, fields, way, KEY)
        if way == "form field" and task == "image-classify":  # pixel rows cannot be form fields: the key
            assert right.status_code == 422 and "image" in right.json()["error"]  # passes, the missing image fails
        else:
            assert right.status_code == 200, (way, right.text)
    assert client.post(path, json=fields, headers={"Authorization": f"Basic {KEY}"}).status_code == 403


def test_routes_that_run_no_model_need_no_key(guarded):
    client = guarded["translation"]
    assert client.get("/languages").status_code == 200
    assert client.get("/health").json()["needs_key"] is True
    assert client.get("/metrics").status_code == 200 and client.get("/").status_code == 200


def test_the_web_page_works_when_given_the_key(task_dirs, live_server, chromium):
    url = live_server(create_app(task_dirs["translation"], limits=ServeLimits(api_key=KEY)))
    page = chromium.new_page()
    try:
        page.goto(url + "/")
        page.locator("#key").wait_for(state="visible", timeout=30_000)  # the server needs a key: the page asks
        page.fill("#text", "a b c")
        page.click("#translate")
        page.locator("#error").filter(has_text="needs an api_key").wait_for(timeout=30_000)
        page.fill("#key", KEY)
        page.click("#translate")
        page.locator("#output").filter(has_text=re.compile(r"\S")).wait_for(timeout=30_000)
        want = TestClient(create_app(task_dirs["translation"])).post("/v1/translate", json={"text": ["a b c"]})
        assert page.inner_text("#output") == want.json()["translations"][0]["text"]
        assert page.inner_text("#error") == ""
        page.reload()  # the page keeps the key in this browser
        assert page.locator("#key").input_value(timeout=30_000) == KEY
    finally:
        page.close()


@pytest.mark.parametrize("given", [123, [KEY, KEY], {"key": KEY}, KEY.upper(), KEY[:-1], ""])
def test_a_key_that_is_not_the_key_is_refused(guarded, given):
    response = guarded["translation"].post("/translate", json={"q": "a b", "api_key": given})
    assert response.status_code == 403, response.text



def test_a_key_that_is_a_lone_surrogate_is_refused_not_a_500(guarded):
    response = guarded["translation"].post("/translate", content=b'{"q": "a b", "api_key": "\\ud800"}',
                                           headers={"content-type": "application/json"})
    assert response.status_code == 403, response.text


def test_the_api_key_and_a_keys_file_both_open_the_server(task_dirs):
    from aiayn.serve.limits import KeyLimits

    limits = ServeLimits(api_key=KEY, api_keys=(("alice", KeyLimits()),))
    with task_clients({"translation": task_dirs["translation"]}, limits=limits) as clients:
        for key in (KEY, "alice"):
            assert clients["translation"].post("/translate", json={"q": "a b", "api_key": key}).status_code == 200
        assert clients["translation"].post("/translate", json={"q": "a b", "api_key": "mallory"}).status_code == 403


def test_the_tables_hold_every_served_task_and_every_route_that_runs_a_model():
    """`tiny_models.TASKS` and `REQUESTS` are kept by hand beside the task registry: a task with routes,
    or a route that runs a model, added to a pipeline and not here would go untested for the key."""
    from aiayn.serve.routes import routes_of
    from aiayn.tasks import TASKS as REGISTRY, task_class
    from tiny_models import TASKS

    served = {name for name in REGISTRY if task_class(name).pipeline.routes}  # mlm has no route
    assert set(TASKS) == served == set(REQUESTS)
    for task in TASKS:
        assert {r.path for r in routes_of(task_class(task).pipeline) if r.runs_model} == {p for p, _ in REQUESTS[task]}, task
