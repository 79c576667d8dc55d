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


def test_a_vocabulary_no_memory_holds_is_counted_not_allocated(capsys):
    """10^12 tokens x 512 would be 2 TB of fp32 weights: counted on the meta device. The base model has
    63,082,496 parameters with the paper's 37,000-token vocabulary, so 44,138,496 besides its embedding."""
    assert main(["params", "--preset", "base", "--vocab", str(10**12)]) == 0
    cells = capsys.readouterr().out.splitlines()[1].split()
    assert cells[0] == "base" and cells[-2] == cells[-1] == f"{63_082_496 - 37_000 * 512 + 10**12 * 512:,}"


def test_generate_help_names_the_pipelines_own_defaults():
    """`aiayn generate`'s flags default to None (the pipeline's GenerateOptions decides); their help says
    what that is, and must keep saying it."""
    import re

    from aiayn.tasks.lm import GenerateOptions

    from cli_parsers import subcommand

    helps = {a.dest: a for a in subcommand("generate")._actions}
    for dest in ("max_new_tokens", "method"):
        assert helps[dest].default is None
        assert re.search(r"default: the pipeline's, (\S+)\)", helps[dest].help).group(1) == str(
            getattr(GenerateOptions(), dest))
