"""Gap and comparison tables: the instance's tick, tolerance marks, references, page width."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nest_cp.harness.compare import read_csv
from nest_cp.harness.compare import render_latex as render_compare_latex
from nest_cp.verify import tables

ROOT = Path(__file__).resolve().parent.parent
TEXTWIDTH_PT = 345.0  # \textwidth of LaTeX's article class at 10pt


def _natural_width_pt(tex: str, match: re.Match) -> float:
    """A conservative estimate of a tabular's natural width: every character half an em of
    its font size (Computer Modern digits are exactly that), plus the column gaps."""
    before = tex[:match.start()]
    opened = before.rfind(r"\end{tabular}")
    size = 7.0 if before.rfind(r"\scriptsize") > opened else \
        9.0 if before.rfind(r"\small") > opened else 10.0
    gap = 3.0 if before.rfind(r"\setlength{\tabcolsep}{3pt}") > opened else 6.0
    rows = [line[:-2].split(" & ") for line in match.group(1).splitlines()
            if line.endswith(r"\\") and r"\multicolumn" not in line]

    def chars(cell: str) -> int:
        cell = cell.replace(r"\%", "%").replace(r"$\sim$", "~").replace(r"$\infty$", "8")
        return len(re.sub(r"\\[a-zA-Z]+(\{\})?", "", cell.replace("--", "-")).strip())

    columns = max(len(row) for row in rows)
    widths = [max(chars(row[i]) for row in rows if i < len(row)) for i in range(columns)]
    return sum(widths) * size / 2 + columns * 2 * gap


def _assert_fits_the_page(tex: str) -> None:
    tabulars = list(re.finditer(r"\\begin\{tabular\}\{[^}]*\}(.*?)\\end\{tabular\}", tex, re.S))
    assert tabulars
    for match in tabulars:
        assert _natural_width_pt(tex, match) <= TEXTWIDTH_PT
    assert tex.count(r"\begin{adjustbox}{max width=\textwidth}") == len(tabulars)


def test_gap_tables_in_latex_fit_the_text_width():
    """Every .tex gap table of the committed results is at most \\textwidth wide by a
    conservative estimate, and guarded by adjustbox's max width (they were 250-710 pt
    wider than a page)."""
    document = json.loads((ROOT / "reports" / "results.json").read_text())
    _assert_fits_the_page(tables.render(document, "tex"))


@pytest.mark.parametrize("cluster", ["tpuv4-fattree", "h100-spineleaf"])
def test_comparison_tables_in_latex_fit_the_text_width(cluster):
    """The paper comparison's .tex table fits \\textwidth (model, devices, ratios, times)."""
    rows = read_csv(ROOT / "reports" / "paper" / cluster / "compare.csv")
    _assert_fits_the_page(render_compare_latex(rows, "manual"))


def _record(tick_s: float, **run) -> dict:
    dp = {"backend": "dp", "space": "structured", "status": "OPTIMAL",
          "objective_ticks": 27_099, "bound_ticks": 27_099, "wall_time_s": 0.1, "source": "solved"}
    milp = {"backend": "milp", "space": "full", "status": "OPTIMAL", "objective_ticks": 27_099,
            "bound_ticks": 27_098, "tolerance_rel": 1e-7, "wall_time_s": 0.2, "source": "solved"}
    return {"instance": "coarse", "path": "x/coarse.json", "family": "f",
            "sizes": {"layers": 2, "devices": 4, "network": "2 tiers", "tick_s": tick_s},
            "runs": [dp, {**milp, **run}], "certificate": "tol", "gap": None,
            "reference": "snapshot same", "failures": [], "notes": []}


def _document(record: dict) -> dict:
    proto = {"date_utc": "d", "versions": {}, "options": {}, "backends_available": {},
             "machine": {"platform": "p", "processor": "x", "cores": 1}}
    return {"protocol": proto, "instances": [record], "summary": tables.family_summary([record])}


def test_tables_use_the_instance_tick():
    """27,099 ticks of 1 us are 27.099 ms (not the 0.027 ms of a 1 ns tick) in Markdown and
    LaTeX; CSV keeps the integer ticks and states the tick."""
    document = _document(_record(1e-6))
    assert "| 27.099 |" in tables.render(document, "md")
    assert "& 27.099 &" in tables.render(document, "tex")
    csv_lines = tables.render(document, "csv").splitlines()
    assert "tick [s]" in csv_lines[0] and ",1e-06," in csv_lines[1] and ",27099," in csv_lines[1]


def test_tolerance_optimum_and_snapshot_are_labelled():
    """A MILP optimum proven within its tolerance shows as OPTIMAL~1e-07 (never plain
    OPTIMAL), and a regression snapshot of the DP is labelled as one, not as a proof."""
    document = _document(_record(1e-9))
    markdown = tables.render(document, "md")
    assert "| 0.027 | 0.027 | OPTIMAL~1e-07 |" in markdown
    assert "snapshot same" in markdown and "regression" in markdown
    assert r"OPT$\sim$" in tables.render(document, "tex")


def test_dp_plan_choices_column():
    """The gap tables show the DP plan's virtual stages and the recompute modes its stages
    use (DESIGN §3.2), in the order none, selective, full: ``2 / sel+full`` in Markdown and
    CSV, ``2/s+f`` in LaTeX; ``—`` when the DP found no plan; old boolean flags read as
    full / none."""
    record = _record(1e-9)
    stages = [{"first_layer": k, "last_layer": k, "recompute": mode}
              for k, mode in enumerate(["full", "selective", "full", "selective"])]
    record["runs"][0]["plan"] = {"virtual_stages": 2, "stages": stages}
    document = _document(record)
    markdown = tables.render(document, "md")
    assert "| dp [s] | dp v/rc |" in markdown and "| 0.10 | 2 / sel+full |" in markdown
    csv_lines = tables.render(document, "csv").splitlines()
    assert csv_lines[0].split(",")[9] == "dp v/rc" and csv_lines[1].split(",")[9] == "2 / sel+full"
    tex = tables.render(document, "tex")
    assert "& DP T & v/rc & exact T &" in tex and "& 0.027 & 2/s+f & 0.027 &" in tex
    assert tables.plan_choices({"plan": {"stages": [{"recompute": True},
                                                     {"recompute": False}]}}) == "1 / none+full"
    assert tables.plan_choices({"plan": None}) == "—" and tables.plan_choices(None) == "—"


def test_side_by_side_defaults_to_a_file_inside_the_repository():
    """reports/paper/side_by_side.py reads NEST's published numbers from a file committed
    beside it (not an absolute path outside the repository) and reproduces the committed
    side_by_side.md from it."""
    import importlib.util

    script = ROOT / "reports" / "paper" / "side_by_side.py"
    spec = importlib.util.spec_from_file_location("side_by_side", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.DEFAULT_REFERENCE.resolve().is_relative_to(ROOT)
    assert module.render(module.DEFAULT_REFERENCE) == \
        (ROOT / "reports" / "paper" / "side_by_side.md").read_text(encoding="utf-8")
