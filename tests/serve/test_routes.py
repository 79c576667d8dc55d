"""`aiayn.serve.routes`: every route's schemas in /openapi.json, and the one validation layer
(`routes.fields`) that reads a request's fields into its model."""

from typing import Optional

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")

from pydantic import ConfigDict  # noqa: E402

from aiayn.serve.limits import ServeLimits  # noqa: E402
from aiayn.serve.routes import routes_of  # noqa: E402
from aiayn.serve.routes.fields import Body, Flag, Texts, validate, whole  # noqa: E402
from aiayn.tasks import RequestError, task_class  # noqa: E402
from serve_helpers import post_json  # noqa: E402
from tiny_models import task_clients  # noqa: E402


def test_openapi_lists_every_routes_request_and_response_schema_with_an_example(task_dirs):
    with task_clients(task_dirs) as clients:
        for task, client in clients.items():
            spec = client.get("/openapi.json").json()
            schemas = spec["components"]["schemas"]
            for route in routes_of(task_class(task).pipeline):
                operation = spec["paths"][route.path][route.method.lower()]
                assert operation["responses"]["200"]["content"]["application/json"]["schema"], (task, route.path)
                if route.body is None:
                    continue
                ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                schema = schemas[ref.rpartition("/")[2]]
                assert schema["examples"] and set(schema["examples"][0]) <= set(schema["properties"]), (task, route.path)
                route.body.model_validate(schema["examples"][0])  # the example is a valid request


class Request(Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "a"}]})

    text: Texts
    beam: Optional[whole(1, lambda limits: limits.max_beam)] = None
    stream: Flag = False


IMAGE = [[0.0, 0.25, 0.5, 0.75]] * 4  # pixel rows: one 4x4 image
LIMITS = ServeLimits(max_texts=2, max_chars=5, max_beam=4)


@pytest.mark.parametrize("fields,status,message", [
    ({"text": "a", "beam": 5}, 422, "beam must be a whole number from 1 to 4"),  # the server's limit
    ({"text": "a", "beam": 2.5}, 422, "beam must be a whole number from 1 to 4"),
    ({"text": "a", "beam": True}, 422, "beam must be a whole number from 1 to 4"),
    ({"text": "a", "beam": "\u00b2"}, 422, "beam must be a whole number from 1 to 4"),
    ({"text": "a", "stream": "yes"}, 422, "stream must be true or false"),
    ({"text": ["a", "b", "c"]}, 413, "3 texts in one request; at most 2"),
    ({"text": "abcdef"}, 413, "a text of 6 characters; at most 5"),
    ({"text": " "}, 422, "text is empty"),
    ({"text": 3}, 422, "text must be a non-empty string or a non-empty list of strings"),
    ({"text": ["a", "\ud800"]}, 422, "text[1]: not valid Unicode (a lone surrogate at character 0)"),
    ({}, 422, "missing field text"),
    ({"text": "a", "beam": 9, "bogus": 1}, 422, "unknown field(s) bogus; this route takes text, beam, stream"),
])
def test_a_bad_field_is_one_error_naming_it(fields, status, message):
    with pytest.raises(RequestError) as refused:
        validate(Request, fields, LIMITS)
    assert (refused.value.status, str(refused.value)) == (status, message)


def test_form_text_reads_as_numbers_and_flags():
    r = validate(Request, {"text": "a", "beam": "3", "stream": "true"}, LIMITS)
    assert (r.beam, r.stream) == (3, True)


def test_an_image_of_too_many_patches_or_two_sizes_in_a_request_is_a_422(clients):
    client = clients["image-classify"]
    too_big = client.post("/v1/classify", json={"image": [[0.5] * 40] * 40})
    assert too_big.status_code == 422 and "400 patches" in too_big.json()["error"], too_big.text
    mixed = client.post("/v1/classify", json={"image": [IMAGE, [[0.5] * 2] * 2]})
    assert mixed.status_code == 422 and "one size" in mixed.json()["error"], mixed.text
    assert client.post("/v1/classify", json={"image": [IMAGE, IMAGE]}).status_code == 200


@pytest.mark.parametrize("fields,message", [
    ({"seed": 1.5}, "seed must be"),  # was a 500: torch's manual_seed takes no float
    ({"top_k": 2.5}, "top_k must be"),
    ({"prompt": ["a b"]}, "prompt must be a string"),  # was a 500: one prompt per request
    ({"max_new_tokens": 10 ** 30}, "integers must fit in 64 bits"),  # refused as the JSON is read
    ({"max_new_tokens": 10 ** 12}, "max_new_tokens must be"),
    ({"temperature": 0.5, "seed": 3}, "temperature set for sampling, but the method is 'greedy'"),  # not ignored
])
def test_generate_refuses_a_value_of_the_wrong_type(clients, fields, message):
    response = clients["lm"].post("/v1/generate", json={"prompt": "a b", "method": "greedy", **fields})
    assert response.status_code == 422 and message in response.json()["error"], response.text


def test_an_image_that_is_not_rows_of_numbers_is_a_422(clients):
    for image in ([["dark", "light"], ["dark", "light"]], [[0.5], [0.5, 0.5]], [[None, 0.5]], "pixels"):
        response = clients["image-classify"].post("/v1/classify", json={"image": image})
        assert response.status_code == 422 and "pixel rows" in response.json()["error"], (image, response.text)


# -- what the routes refuse ------------------------------------------------
@pytest.mark.parametrize("options", [{"beam_size": 2, "nbest": 3}, {"method": "greedy", "nbest": 2},
                                     {"beam_size": 1, "nbest": 2}])
def test_nbest_over_the_beam_is_refused_not_clamped(clients, options):
    response = clients["translation"].post("/v1/translate", json={"text": ["a b"], **options})
    assert response.status_code == 422 and "needs beam search with beam_size >=" in response.json()["error"]


def test_nbest_within_the_beam_gives_that_many_hypotheses(clients):
    response = clients["translation"].post("/v1/translate", json={"text": ["a b"], "beam_size": 3, "nbest": 3})
    assert response.status_code == 200 and len(response.json()["translations"][0]["hypotheses"]) == 3


@pytest.mark.parametrize("task,path,fields", [
    ("translation", "/translate", {"q": "a b", "source": "de", "target": "en"}),
    ("translation", "/v1/translate", {"text": ["a b"]}),
    ("summarization", "/v1/summarize", {"text": "a b"}),
    ("qa", "/v1/answer", {"context": "a b", "question": "c"}),
    ("lm", "/v1/generate", {"prompt": "a b", "max_new_tokens": 2}),
    ("classify", "/v1/classify", {"text": "a b"}),
    ("image-classify", "/v1/classify", {"image": IMAGE}),
])
def test_an_unknown_field_is_a_422_naming_it(clients, task, path, fields):
    assert clients[task].post(path, json=fields).status_code == 200
    response = clients[task].post(path, json={**fields, "beam": 4})
    assert response.status_code == 422 and "unknown field(s) beam" in response.json()["error"], response.text


@pytest.mark.parametrize("task,path,body,where", [
    ("translation", "/translate", '{"q": "a \\ud800 b", "source": "de", "target": "en"}', "q: "),
    ("translation", "/v1/translate", '{"text": ["a b", "a \\udcff"]}', "text[1]: "),
    ("summarization", "/v1/summarize", '{"text": "\\ud800"}', "text: "),
    ("qa", "/v1/answer", '{"context": "a b", "question": "c \\udfff"}', "question: "),
    ("lm", "/v1/generate", '{"prompt": "a \\ud800", "max_new_tokens": 2}', "prompt: "),
    ("classify", "/v1/classify", '{"text": ["a", "\\ud800"]}', "text[1]: "),
])
def test_a_lone_surrogate_in_a_text_is_a_422(clients, task, path, body, where):
    """JSON's "\\ud800" is a str no tokenizer takes: a sentencepiece model answered 500 "decoding failed"."""
    response = post_json(clients[task], path, body.encode())
    assert response.status_code == 422, response.text
    assert response.json()["error"].startswith(where) and "lone surrogate" in response.json()["error"]


@pytest.mark.parametrize("extra", [{}, {"method": "greedy", "stream": True}])
def test_decoding_fields_that_cannot_go_together_are_a_422(clients, extra):
    """min_len beyond the vocabulary with no_repeat_ngram_size 1: each field is in bounds, the pair is not
    (`aiayn translate` refuses it too); the server answered a plain-text 500."""
    body = {"text": ["a b"], "min_len": 200, "no_repeat_ngram_size": 1, **extra}
    response = clients["translation"].post("/v1/translate", json=body)
    assert response.status_code == 422, response.text
    assert "cannot be met with no_repeat_ngram_size 1" in response.json()["error"]


def test_libretranslate_refuses_html(clients):
    fields = {"q": "<b>a</b> b", "source": "de", "target": "en"}
    assert clients["translation"].post("/translate", json={**fields, "format": "text"}).status_code == 200
    response = clients["translation"].post("/translate", json={**fields, "format": "html"})
    assert response.status_code == 422 and "format must be 'text'" in response.json()["error"]


@pytest.mark.parametrize("context,question", [("", "c"), ("a b", ""), ("  ", "c"), ("a b", "\n"),
                                              (["a b", ""], ["c", "d"])])
def test_answer_refuses_an_empty_context_or_question(clients, context, question):
    response = clients["qa"].post("/v1/answer", json={"context": context, "question": question})
    assert response.status_code == 422, response.text
