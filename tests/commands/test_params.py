"""`aiayn params`: each preset's measured parameter count beside the analytic one, and the shipped
recipes' models."""

from aiayn.cli import main
from aiayn.commands.params import FAMILY


def test_measured_and_analytic_counts_agree_and_every_family_recipe_builds(capsys):
    assert main(["params", "--preset", "tiny", "--preset", "small", "--vocab", "1000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    presets = [line.split() for line in lines[1:3]]
    assert [row[0] for row in presets] == ["tiny", "small"]
    assert all(row[-2] == row[-1] and int(row[-1].replace(",", "")) > 0 for row in presets)
    recipes = {line.split()[0] for line in lines if line.split() and line.split()[0] in {r for r, _, _ in FAMILY}}
    assert recipes == {r for r, _, _ in FAMILY}
