"""Where the read-only corpora beside the project live: ../shared/data, or $AIAYN_SHARED_DATA.
One definition for conftest.py files and test helpers (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import os
from pathlib import Path

SHARED_DATA = Path(os.environ.get("AIAYN_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")).resolve()
