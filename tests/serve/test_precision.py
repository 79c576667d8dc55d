"""`aiayn serve --quantize int8` / `--precision`: the decoder that answers computes as asked, in the
worker process and in the server's own thread; a model without those options refuses them by name."""

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the test extra)")

from fastapi.testclient import TestClient  # noqa: E402

from aiayn.serve.app import create_app  # noqa: E402
from aiayn.serve.batcher import BatchConfig  # noqa: E402
from aiayn.tasks import load_pipeline  # noqa: E402
from tiny_models import tiny_model  # noqa: E402

TEXTS = ["a b c d", "d c b a a", "b"]


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_int8_server_answers_what_an_int8_translator_answers(model_dir, worker):
    settings = {"method": "beam", "beam_size": 2, "max_len_b": 6}

    def scored(pipeline):  # [(text, score)] per text: int8 moves the scores where the texts may agree
        return [hyps[0] for hyps in pipeline.translator.translate(TEXTS, max_len_a=0.0, nbest=1, **settings)]

    want, fp32 = scored(load_pipeline(model_dir, quantize="int8")), scored(load_pipeline(model_dir))
    app = create_app(model_dir, batching=BatchConfig(max_wait_ms=5, worker=worker), options={"quantize": "int8"})
    with TestClient(app) as client:
        body = client.post("/v1/translate", json={"text": TEXTS, "nbest": 1, **settings})
        assert body.status_code == 200, body.text
        body = body.json()
    got = [(t["hypotheses"][0]["text"], t["hypotheses"][0]["score"]) for t in body["translations"]]
    assert [t for t, _ in got] == [t for t, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-5)  # int8's scores,
    assert [s for _, s in got] != pytest.approx([s for _, s in fp32], abs=1e-5)  # not fp32's
    if worker == "thread":
        assert app.state.services[0].pipeline.translator.decoder.precision == "int8"


def test_a_language_model_refuses_quantize_by_name(tmp_path):
    directory = tiny_model(tmp_path / "lm", "lm")
    with pytest.raises(ValueError, match="a lm model has no quantize option"):
        create_app(directory, batching=BatchConfig(worker="thread"), options={"quantize": "int8"})


def test_a_process_that_built_an_app_but_never_served_it_exits(model_dir):
    """The decoder worker ignores SIGTERM; an app that was never started (no lifespan, so no close) must
    still let its process exit instead of hanging in multiprocessing's exit hook."""
    import subprocess
    import sys

    code = ("from aiayn.serve.app import create_app; from aiayn.serve.batcher import BatchConfig; "
            f"app = create_app({str(model_dir)!r}, batching=BatchConfig(worker='process')); "
            "print(app.state.services[0].worker.pid)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip().splitlines()[-1]) > 0
