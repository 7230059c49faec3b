"""Every `nest-cp` command in the README's sh blocks runs, in order, and says what the
README says it says; so do the examples in the commands' --help texts."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from nest_cp import evaluate, load_instance, load_plan
from nest_cp.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


def readme_commands() -> list[list[str]]:
    """The argument lists of every `nest-cp ...` line of the README's ```sh blocks, in
    order (backslash continuations joined, comments dropped). ```text blocks are syntax
    summaries and are not run."""
    commands = []
    for block in SH_BLOCK.findall(README.read_text(encoding="utf-8")):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "nest-cp":
                commands.append(words[1:])
    return commands


def _run(args: list[str]):
    return CliRunner().invoke(main, args)


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> dict[str, object]:
    """Run the README's commands one after the other in a fresh directory that sees the
    repository's instances/ (the tour's last steps read instances/small/)."""
    workdir = tmp_path_factory.mktemp("tour")
    (workdir / "instances").symlink_to(ROOT / "instances")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workdir)
        results = [(args, _run(args)) for args in readme_commands()]
    return {"dir": workdir, "results": results}


def _output(tour, *prefix: str) -> str:
    """The output of the first README command starting with ``prefix``."""
    for args, result in tour["results"]:
        if tuple(args[:len(prefix)]) == prefix:
            return result.output
    raise AssertionError(f"the README runs no `nest-cp {' '.join(prefix)}`")


def test_the_readme_has_a_tour_of_every_step():
    """The README's sh blocks make an instance, solve, show, evaluate, export, certify
    and compare (the five-minute tour is complete)."""
    firsts = {tuple(args[:2]) if args[0] == "instance" else args[0]
              for args in readme_commands()}
    assert {("instance", "list"), ("instance", "new"), ("instance", "show"), "solve",
            "show", "evaluate", "export", "verify", "table", "compare"} <= firsts


def test_every_readme_command_exits_0(tour):
    """Each command of the tour succeeds (exit 0), in the order the README gives."""
    failed = [(" ".join(args), result.exit_code, result.output[-400:])
              for args, result in tour["results"] if result.exit_code != 0]
    assert not failed


def test_the_tour_writes_what_it_says(tour):
    """The files the tour names exist: the plan, the drawing, the launch files, the gap
    table and the comparison."""
    workdir = tour["dir"]
    for name in ("x.json", "p.json", "p.png", "train.sh", "ds.json",
                 "cert/gap_table.md", "cert/gap_table.csv", "cert/gap_table.tex",
                 "cmp/compare.csv", "cmp/compare.md"):
        assert (workdir / name).is_file(), name
    assert (workdir / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert "--use-megatron-fsdp" in (workdir / "train.sh").read_text()


def test_the_solved_plan_evaluates_to_the_objective_solve_printed(tour):
    """p.json, written by `solve -o`, evaluates (referee) to the objective `solve` printed."""
    workdir = tour["dir"]
    result = evaluate(load_instance(workdir / "x.json"), load_plan(workdir / "p.json"))
    assert result.feasible
    assert f"objective  {result.objective_ticks} ticks" in _output(tour, "solve", "x.json")


def test_the_numbers_the_readme_quotes_are_what_the_commands_print(tour):
    """The figures the tour's prose quotes come out of the commands it shows."""
    text = README.read_text(encoding="utf-8")
    solve = _output(tour, "solve", "x.json")
    assert "status     OPTIMAL" in solve and "246.85 samples/s" in solve
    assert "plan       tp=1 ep=1 microbatch=1 zero=2 stages=1 v=1 dp=64" in solve
    assert "215.25 samples/s" in _output(tour, "evaluate", "x.json", "--pp")
    cpsat = _output(tour, "solve", "instances/small/h2-dense-l4-d8.json")
    assert "status     OPTIMAL" in cpsat
    assert re.search(r"objective  45981000 ticks.*\nbound      45981000 ticks", cpsat)
    gap_table = (tour["dir"] / "cert" / "gap_table.md").read_text()
    assert "| yes | 0.000% |" in gap_table
    assert "| yes | 0.000% |" in _output(tour, "table")
    compare = _output(tour, "compare")
    assert re.search(r"\| x \| llama2-7b \| nest-h100-spineleaf \| 64 \| 7\.29 \| 1\.00 "
                     r"\| 7\.01 \|", compare)
    for quoted in ("246.85 samples/s", "215.25 samples/s", "45.981 ms", "7.29x", "7.01x"):
        assert quoted in text


def test_the_readme_evaluate_what_if_is_one_the_launcher_accepts(tour):
    """The tour's what-if uses one recompute mode; the mode the README says the megatron
    launcher refuses (all-but-last) is indeed refused with exit 2 naming the rule."""
    refused = _run(["evaluate", str(tour["dir"] / "x.json"), "--pp", "4", "--dp", "16",
                    "--recompute", "all-but-last"])
    assert refused.exit_code == 2
    assert "recompute" in refused.output


# ------------------------------------------------------------------ --help examples

def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


def _help_examples() -> list[str]:
    """Command lines (`nest-cp ...`, `$ nest-cp ...`) in any command's help or epilog."""
    found = []
    for _, command in _commands(main):
        for text in (command.help or "", command.epilog or ""):
            found += [line.strip().removeprefix("$ ") for line in text.splitlines()
                      if line.strip().removeprefix("$ ").startswith("nest-cp ")]
    return found


def test_help_texts_hold_no_untested_command_examples():
    """No --help text shows a `nest-cp ...` command line this file does not run; add one
    here (and run it) when a help text gains an example."""
    assert _help_examples() == []


def test_help_option_examples_run(tmp_path: Path):
    """The values `instance new --help` gives as examples ("e.g. 1,2,4" for
    --microbatches and --virtual-stages, "e.g. 1,2,4,8,16" for --tp-widths, "e.g. 1,2,4,8"
    for --ep-widths, an MoE model's) are accepted."""
    help_text = _run(["instance", "new", "--help"]).output
    assert help_text.count("e.g. 1,2,4") == 4
    out = tmp_path / "y.json"
    result = _run(["instance", "new", "--model", "bert-large", "--devices", "8",
                   "--network", "nest-h100-spineleaf", "--microbatches", "1,2,4",
                   "--virtual-stages", "1,2,4", "--tp-widths", "1,2,4,8,16", "-o", str(out)])
    assert result.exit_code == 0, result.output
    training = json.loads(out.read_text())["training"]
    assert training["microbatches"] == [1, 2, 4] and training["virtual_stages"] == [1, 2, 4]
    moe = _run(["instance", "new", "--model", "mixtral-8x7b", "--devices", "8", "--network",
                "nest-h100-spineleaf", "--ep-widths", "1,2,4,8", "-o", str(out)])
    assert moe.exit_code == 0, moe.output
