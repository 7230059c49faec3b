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
    assert "| dp status | dp v/rc |" in markdown and "| OPTIMAL | 2 / sel+full |" in markdown
    csv_lines = tables.render(document, "csv").splitlines()
    assert csv_lines[0].split(",")[8] == "dp v/rc" and csv_lines[1].split(",")[8] == "2 / sel+full"
    tex = tables.render(document, "tex")
    assert "& DP T & v/rc & exact T &" in tex and "& 0.027 & 2/s+f & 0.027 &" in tex
    assert tables.plan_choices({"plan": {"stages": [{"recompute": True},
                                                     {"recompute": False}]}}) == "1 / none+full"
    assert tables.plan_choices({"plan": None}) == "—" and tables.plan_choices(None) == "—"


def test_results_document_drops_what_changes_between_runs():
    """The same run solved now (its keys in build order) and read from the cache (sorted
    keys, another wall time) gives the same results.json text: no wall time or source in the
    runs or their SDP searches, no median times in the summary."""
    solved = _record(1e-9)
    solved["runs"][1]["sdp"] = {"status": "OPTIMAL", "wall_time_s": 0.3, "effective": "1/2"}
    cached = {**solved, "runs": json.loads(json.dumps(solved["runs"], sort_keys=True))}
    for run in cached["runs"]:
        run.update(source="cache", wall_time_s=9.9)
    cached["runs"][1]["sdp"]["wall_time_s"] = 9.9
    settings = tables.settings({"x": {"seed": 0}}, {"dp": True})
    texts = [json.dumps(tables.results_document([record], settings), indent=1)
             for record in (solved, cached)]
    assert texts[0] == texts[1]
    for volatile in ("wall_time_s", "source", "median", "date_utc", "machine", "command"):
        assert volatile not in texts[0]
    assert '"effective": "1/2"' in texts[0] and '"objective_ticks": 27099' in texts[0]


def test_tables_ignore_the_wall_times_of_an_old_results_file():
    """A results.json with wall times (runs, summary medians, date and machine) renders the
    tables of the same results without them, in every format."""
    old = _document(_record(1e-9))
    old["summary"][0].update(median_dp_s=0.1, median_exact_s=0.2)
    record = tables.deterministic_record(old["instances"][0])
    proto = {key: old["protocol"][key] for key in ("versions", "options", "backends_available")}
    new = {"protocol": proto, "instances": [record], "summary": tables.family_summary([record])}
    for fmt in tables.FORMATS:
        assert tables.render(old, fmt) == tables.render(new, fmt)
    markdown = tables.render(old, "md")
    assert "0.10" not in markdown and "[s]" not in markdown and "Date" not in markdown
    assert "timings.md and timings.json" in markdown


def test_timings_keep_every_run_and_the_family_medians():
    """timings.json lists each run's backend, space, source and wall time (its SDP search's
    too); the medians count the runs with a result, solved or cached; timings.md shows the
    cached ones as such and the run's date and machine."""
    from nest_cp.verify import timings

    record = _record(1e-9)
    record["runs"][1].update(source="cache", sdp={"wall_time_s": 0.05})
    record["runs"].append({"backend": "cpsat", "space": "full", "source": "none",
                           "wall_time_s": 0.0})
    other = {**_record(1e-9), "instance": "other"}
    other["runs"][0]["wall_time_s"] = 0.3
    context = {"date_utc": "2030-01-01T00:00:00Z", "command": "nest-cp verify",
               "machine": {"platform": "p", "processor": "x", "cores": 2}, "jobs": 2,
               "executor": "local"}
    document = timings.timings_document([record, other], context)
    assert document["instances"][0]["runs"][1] == {
        "backend": "milp", "space": "full", "source": "cache", "wall_time_s": 0.2,
        "sdp_wall_time_s": 0.05}
    assert document["summary"] == [{"family": "f", "count": 2, "median_dp_s": 0.2,
                                    "median_exact_s": 0.2}]
    markdown = timings.render_markdown(document)
    assert "| coarse | f | 0.10 | — | 0.20 (cache) |" in markdown
    assert "| other | f | 0.30 | — | 0.20 |" in markdown
    assert "| f | 2 | 0.20 | 0.20 |" in markdown and "2030-01-01T00:00:00Z" in markdown


def test_side_by_side_defaults_to_a_file_inside_the_repository():
    """scripts/reports/paper_side_by_side.py reads NEST's published numbers from a file committed
    in reports/paper/ (not an absolute path outside the repository) and reproduces the committed
    side_by_side.md from it."""
    import importlib.util

    script = ROOT / "scripts" / "reports" / "paper_side_by_side.py"
    spec = importlib.util.spec_from_file_location("side_by_side", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.DEFAULT_REFERENCE.resolve().is_relative_to(ROOT)
    assert module.render(module.DEFAULT_REFERENCE) == \
        (ROOT / "reports" / "paper" / "side_by_side.md").read_text(encoding="utf-8")
