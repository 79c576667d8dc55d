"""The web page of `aiayn serve` in a real browser: Debian's Chromium, headless, driven by Playwright.

It types a sentence, clicks Translate and checks the page against the API: the translation, every cell
of the heatmap (for the head average and for a chosen layer and head), and the shading of the source
pieces while a target piece is hovered. Without Playwright or Chromium it skips, saying what is missing.

The default model is the demo's reverse task, trained here for a few seconds. The README's screenshot
comes from a real model:
    AIAYN_UPDATE_SCREENSHOTS=1 AIAYN_BROWSER_MODEL=runs/multi30k-de-en/model \
    AIAYN_BROWSER_TEXT="Zwei junge Hunde spielen im Schnee." pytest tests/serve/test_browser.py
"""

import json
import os
import re
import shutil
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed: pip install -e '.[test]' "
                               "(./setup.sh does it; no `playwright install` needed, the test uses Debian's chromium)")
CHROMIUM = os.environ.get("AIAYN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM:
    pytest.skip("Chromium not found: apt-get install chromium (./setup.sh does it as root), or point "
                "AIAYN_CHROMIUM at a Chromium binary", allow_module_level=True)

from aiayn.serve.app import create_app  # noqa: E402

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "serve_page.png"
TEXT = os.environ.get("AIAYN_BROWSER_TEXT", "a b c d e f g")
# The demo recipe cut to 300 updates: 98% exact match on held-out reversals, about 8 s on 2 cores.
DEMO_OVERRIDES = ["train.max_updates=300", "optim.warmup_steps=100", "data.n_train=3000", "train.progress=false",
                  "train.validate_every=1000000", "train.save_every_updates=1000000"]


@pytest.fixture(scope="module")
def trained_model_dir(tmp_path_factory) -> Path:
    if os.environ.get("AIAYN_BROWSER_MODEL"):
        return Path(os.environ["AIAYN_BROWSER_MODEL"])
    from aiayn.commands.demo import demo_config
    from aiayn.training.pipeline import train

    run_dir = tmp_path_factory.mktemp("demo")
    train(demo_config(run_dir, DEMO_OVERRIDES))
    return run_dir / "model"


@pytest.fixture(scope="module")
def url(trained_model_dir, live_server) -> str:
    return live_server(create_app(trained_model_dir))


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def js_errors() -> list[str]:
    return []


@pytest.fixture
def page(url, browser, js_errors):  # the model trains before Chromium starts, not while it idles
    """The page at `/`; JavaScript errors and console errors go to `js_errors`."""
    page = browser.new_page(viewport={"width": 1000, "height": 700})
    page.on("pageerror", lambda e: js_errors.append(str(e)))
    page.on("console", lambda m: js_errors.append(m.text) if m.type == "error" else None)
    page.goto(url + "/")
    yield page
    page.close()


def api_translate(url: str, text: str) -> dict:
    """What the page asks for: POST /v1/translate with the API's defaults and the attention."""
    body = json.dumps({"text": [text], "return_attention": True}).encode()
    request = urllib.request.Request(url + "/v1/translate", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["translations"][0]


def heatmap_cells(page) -> list[list[int]]:
    """The red channel at the centre of every cell of the canvas, (T, S): white is 255, full weight 0."""
    return page.evaluate("""(n) => {
        const canvas = document.getElementById("heatmap");
        const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        const cell = canvas.width / n, rows = [];
        for (let y = cell / 2; y < canvas.height; y += cell) {
            const row = [];
            for (let x = cell / 2; x < canvas.width; x += cell) {
                row.push(pixels[(Math.floor(y) * canvas.width + Math.floor(x)) * 4]);
            }
            rows.push(row);
        }
        return rows;
    }""", page.locator("#source span").count())


def assert_drawn(cells: list[list[int]], weights: list[list[float]]) -> None:
    """Each cell shows its weight (255 · (1 - w) in red and green), and the map is not blank."""
    assert len(cells) == len(weights) and all(len(c) == len(w) for c, w in zip(cells, weights))
    for cell_row, weight_row in zip(cells, weights):
        for got, w in zip(cell_row, weight_row):
            assert abs(got - 255 * (1 - w)) <= 1, (cells, weights)
    assert len({v for row in cells for v in row}) >= 3, f"a blank heatmap: {cells}"


def assert_labels_aligned(page) -> None:
    """Each source piece sits over its column of the heatmap, each target piece beside its row."""
    canvas = page.locator("#heatmap").bounding_box()
    source, target = page.locator("#source span").all(), page.locator("#target span").all()
    cell = canvas["width"] / len(source)
    assert canvas["height"] == pytest.approx(cell * len(target))
    for s, box in enumerate(span.bounding_box() for span in source):
        assert box["x"] + box["width"] / 2 == pytest.approx(canvas["x"] + (s + 0.5) * cell, abs=1)
        assert box["y"] + box["height"] <= canvas["y"] + 1
    for t, box in enumerate(span.bounding_box() for span in target):
        assert box["y"] + box["height"] / 2 == pytest.approx(canvas["y"] + (t + 0.5) * cell, abs=1)
        assert box["x"] + box["width"] <= canvas["x"] + 1


def head_average(layer: list) -> list[list[float]]:
    return [[sum(head[t][s] for head in layer) / len(layer) for s in range(len(layer[0][0]))]
            for t in range(len(layer[0]))]


def source_shades(page) -> list[float]:
    """The alpha of each source piece's background: the weight the hovered target piece gave it."""
    colours = page.locator("#source span").evaluate_all("spans => spans.map(s => getComputedStyle(s).backgroundColor)")
    return [float(m.group(1)) if (m := re.fullmatch(r"rgba\(0, 0, 255, ([\d.e-]+)\)", c)) else
            1.0 if c == "rgb(0, 0, 255)" else 0.0 for c in colours]


def test_page_translates_and_draws_the_attention(page, url, js_errors, tmp_path):
    page.fill("#text", TEXT)
    page.click("#translate")
    page.locator("#output").filter(has_text=re.compile(r"\S")).wait_for(timeout=30_000)
    want = api_translate(url, TEXT)
    attention = want["attention"]
    assert page.inner_text("#output") == want["text"]
    if "AIAYN_BROWSER_MODEL" not in os.environ:  # the demo model has learnt to reverse
        assert want["text"] == " ".join(reversed(TEXT.split()))
    assert page.locator("#source span").all_inner_texts() == attention["source"]
    assert page.locator("#target span").all_inner_texts() == attention["target"]

    n_layers, n_heads = len(attention["weights"]), len(attention["weights"][0])
    assert page.locator("#layer option").count() == n_layers and page.input_value("#layer") == str(n_layers - 1)
    assert page.locator("#head option").count() == n_heads + 1 and page.input_value("#head") == "-1"  # + average
    assert_drawn(heatmap_cells(page), head_average(attention["weights"][-1]))
    assert_labels_aligned(page)
    page.select_option("#layer", "0")
    page.select_option("#head", str(n_heads - 1))
    assert_drawn(heatmap_cells(page), attention["weights"][0][n_heads - 1])

    page.select_option("#layer", str(n_layers - 1))
    page.select_option("#head", "-1")
    average = head_average(attention["weights"][-1])
    for t in range(len(attention["target"])):
        page.hover(f"#target span >> nth={t}")
        assert source_shades(page) == pytest.approx(average[t], abs=0.01)
    page.hover("h1")
    assert source_shades(page) == [0.0] * len(attention["source"])

    page.hover("#target span >> nth=1")  # the picture shows a hovered piece
    page.screenshot(path=tmp_path / "serve_page.png", full_page=True)
    if os.environ.get("AIAYN_UPDATE_SCREENSHOTS"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "serve_page.png", SCREENSHOT)
    assert not js_errors


def test_page_shows_the_api_error(page, js_errors):
    page.click("#translate")  # nothing typed: the API answers 422
    page.locator("#error").filter(has_text="text is empty").wait_for(timeout=30_000)
    assert page.inner_text("#output") == "" and page.locator("#controls").is_hidden()
    assert len(js_errors) == 1 and "422" in js_errors[0]  # Chromium logs the failed request, nothing else
