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
from tiny_models import TASKS, task_clients  # noqa: E402


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
