"""`benchmarks/_common.py`, what every benchmark script shares: standard JSON, peers that cannot be imported."""

from __future__ import annotations

import json
import math

import pytest

from bench_helpers import benchmark


def test_emit_json_writes_standard_json_with_null_for_nan(capsys):
    benchmark("_common").emit_json({"rows": [{"sd": math.nan, "bleu": 41.5}], "summary": (math.inf, -math.inf, 1)})
    line = capsys.readouterr().out.strip()
    parsed = json.loads(line, parse_constant=lambda word: pytest.fail(f"non-standard JSON word {word}"))
    assert parsed == {"rows": [{"sd": None, "bleu": 41.5}], "summary": [None, None, 1]}


def test_a_peer_that_does_not_import_is_left_out_with_a_note(capsys, monkeypatch, tmp_path):
    """A missing package, or one that fails to import (a broken install), is a skipped row, not a crash."""
    common = benchmark("_common")
    assert common.peer_installed("json", "json row")
    assert not common.peer_installed("no_such_peer_module", "ct2 rows")
    (tmp_path / "broken_peer.py").write_text("raise ImportError('a broken install')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not common.peer_installed("broken_peer", "broken rows")
    err = capsys.readouterr().err
    assert "ct2 rows: skipped: no_such_peer_module does not import" in err and "broken rows: skipped" in err
