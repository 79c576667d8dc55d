"""The plug-in proof (issue 28): a task defined only in tests/ (`sort_task`) is trained with
`aiayn train`, scored with `aiayn evaluate --model` and answers over HTTP from `aiayn serve`'s app,
and no file under src/ knows its name."""

import json
import random
from pathlib import Path

import pytest

from aiayn.cli import main
from sort_task import NAME, sorted_exact

SRC = Path(__file__).parents[2] / "src"


@pytest.mark.slow  # a learning check of more than a few seconds
def test_a_task_from_outside_trains_scores_and_serves(tmp_path, capsys):
    recipe = tmp_path / "sort.toml"
    recipe.write_text(f'task = "{NAME}"\n[model]\npreset = "tiny"\nd_model = 64\nd_ff = 256\nn_heads = 4\n'
                      '[data]\nmax_tokens = 1200\nbatching = "random"\n[optim]\nwarmup_steps = 100\n'
                      '[train]\nmax_updates = 250\ncooldown = 0.3\nbleu = false\nprogress = false\n'
                      '[decode]\nmethod = "greedy"\nmax_len_a = 1.0\nmax_len_b = 1\n')
    assert main(["train", str(recipe), "--run-dir", str(tmp_path / "run")]) == 0
    model = tmp_path / "run" / "model"
    assert json.loads((model / "task.json").read_text())["task"] == NAME

    rng = random.Random(0)
    lists = [[3, 1, 2]] + [[rng.randrange(10) for _ in range(rng.randint(2, 4))] for _ in range(29)]
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("".join(" ".join(map(str, x)) + "\n" for x in lists))
    ref.write_text("".join(" ".join(map(str, sorted(x))) + "\n" for x in lists))
    capsys.readouterr()
    assert main(["evaluate", "--model", str(model), "--src", str(src), "--ref", str(ref), "--json",
                 "--save-hyp", str(tmp_path / "hyp.txt")]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    hyps = (tmp_path / "hyp.txt").read_text().splitlines()
    assert result["metric"] == "sorted_exact"  # the task's own metric, which aiayn does not know
    assert result["sorted_exact"] == sorted_exact(hyps, [[r] for r in ref.read_text().splitlines()])
    assert result["sorted_exact"] >= 90  # it learns to sort in 250 updates (a learning check: 100% when written)

    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from fastapi.testclient import TestClient

    from aiayn.serve.app import create_app

    with TestClient(create_app(model)) as client:
        answer = client.post("/v1/sort", json={"numbers": lists[0]})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"sorted": [int(w) for w in hyps[0].split()]}  # the same as through evaluate
        assert client.post("/v1/sort", json={"numbers": "3 1 2"}).status_code == 422
        assert "/v1/sort" in client.get("/health").json()["routes"]


def test_no_file_in_src_knows_the_task():
    names = ("sort_task", "SortTask", "sorted_exact", "/v1/sort")
    hits = [f"{path}: {name}" for path in SRC.rglob("*") if path.is_file() and path.suffix in (".py", ".html", ".toml")
            for name in names if name in path.read_text(encoding="utf-8")]
    assert hits == []
