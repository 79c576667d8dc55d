"""The CI configuration: `.ci/run` is the README's test command, and it runs the slow tests too."""

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    """The command line of the README's first code block that runs pytest, without its comment."""
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S).group(1)
    lines = [line.split("#")[0].strip() for line in block.splitlines() if "pytest" in line]
    assert len(lines) == 1, lines
    return lines[0]


def ci_command() -> str:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    return [line for line in lines if line and not line.startswith(("#", "set ", "cd "))][-1]


def test_ci_runs_exactly_the_readme_test_command():
    assert ci_command() == readme_test_command()


def test_ci_runs_the_slow_tests_after_the_default_suite():
    """pytest's addopts leave the slow tests out of a plain run, so CI needs a second run for them."""
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-m 'not slow'" in addopts
    runs = [shlex.split(part) for part in ci_command().split("&&")]
    pytest_runs = [words[words.index("pytest") + 1:] for words in runs if "pytest" in words]
    assert pytest_runs == [["-n", "2"], ["-m", "slow", "-n", "2"]]  # the default suite first: a failure there stops CI sooner
