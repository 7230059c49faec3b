"""``nest-cp solve``: run a backend on an instance and print or write its plan and result."""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import replace

import click

from nest_cp import io
from nest_cp.cli.options import PROCESS_STARTED, check_writable, int_list, rate, reject_options
from nest_cp.cli.report import plan_report
from nest_cp.cost import terms as cost
from nest_cp.cost.evaluate import evaluate
from nest_cp.dp.planner import STOP_AFTER_S
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.exits import ExitCode
from nest_cp.model.instance import Instance
from nest_cp.model.launchers.search import rules_applied
from nest_cp.model.plan import Plan
from nest_cp.model.result import MAX_WORKERS, SolveOptions, SolveResult, Space, Status, status_text
from nest_cp.solvers.registry import (
    BACKENDS,
    HONOURED_OPTIONS,
    check_result,
    context_note,
    run_unrefereed,
)

MIN_TIME_LEFT_S = 0.01  # what an exact backend still gets when the DP hint used the limit up
# What follows the search, in referee checks of the DP hint (measured at 1,048,576
# devices: the check 1.0, the plan file 0.9, the placement report 1.6, together 3.5 of the
# hint's check); --time-limit keeps that much time back for them.
AFTER_SEARCH_CHECKS = 4  # solve's --help says "four times": change both
# Without a hint to time: one referee check's seconds per device (0.9-1.8 s at 1,048,576
# devices on a loaded 2-core machine)
CHECK_S_PER_DEVICE = 1.5e-6
# `solve --backend dp --time-limit S`: the DP stops this long before S (counted from the
# process's start), for what follows it (the referee's evaluation of the plan, the record,
# the placement map, the interpreter's exit), so the command ends within S + 2 s even on a
# busy machine
DP_AFTERWORK_S = 0.5  # solve's --help says "half a second": change both


# solve's options that map to a SolveOptions field or extra key a backend may not honour
_SOLVE_OPTIONS = {"space": "space", "time_limit": "time_limit_s", "seed": "seed",
                  "workers": "workers", "hint": "hint", "milp_solver": "milp_solver",
                  "degrees": "degrees", "vp": "virtual_stages", "recompute": "recompute",
                  "budget": "budget", "chains": "chains", "flat_bandwidth": "flat_bandwidth_Bps",
                  "rank_by": "rank_by", "work_limit": "work_limit"}
_FLAGS = {field: f"--{name.replace('_', '-')}" for name, field in _SOLVE_OPTIONS.items()}
_FLAGS["hint"] = "--hint/--no-hint"


@click.command("solve")
@click.argument("instance_path", metavar="INSTANCE", type=click.Path(dir_okay=False))
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="dp", show_default=True)
@click.option("--space", type=click.Choice([s.value for s in Space]), default=None,
              help="Search space (default: structured for dp, full for exact backends).")
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, help="cpsat/milp/mcmc: seconds for the whole solve (the "
              "DP hint included); dp: only when given, then it stops in time with its "
              "best plan and a bound (without it the DP runs to its optimum).")
@click.option("--work-limit", type=click.FloatRange(min=0, min_open=True), default=None,
              help="cpsat/milp: deterministic work units for the solver runs (about a "
              "second of one core each), so that the same command gives the same answer on "
              "any machine at any load; --time-limit stays a wall-clock cap on the whole "
              "solve, and a result it ends says so (docs/cli.md).  [default: none]")
@click.option("--seed", type=int, default=0, show_default=True, help="cpsat/milp/mcmc.")
@click.option("--workers", type=click.IntRange(1, MAX_WORKERS), default=1, show_default=True,
              help="cpsat/milp: solver threads.")
@click.option("--milp-solver", type=click.Choice(["cbc", "highs"]), default="cbc",
              show_default=True)
@click.option("--hint/--no-hint", default=True, show_default=True,
              help="cpsat/milp: start from the DP plan (hint / warm start).")
@click.option("--degrees", callback=int_list, default=None,
              help="fixed: p,d,t[,e[,c]] (pipeline, data, tensor[, expert[, context]] "
                   "degrees).")
@click.option("--vp", type=click.IntRange(min=1), default=None,
              help="fixed: virtual stages v (interleaved 1F1B; default 1).")
@click.option("--recompute", type=click.Choice(["none", "selective", "full", "all-but-last"]),
              default=None, help="fixed: every stage's recompute mode, or full on all but the "
              "last (default: Megatron's rule, none / selective / full where needed).")
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="mcmc: proposals in total (default 2000).")
@click.option("--chains", type=click.IntRange(min=1), default=None,
              help="mcmc: independent chains (default 4).")
@click.option("--flat-bandwidth", type=click.FloatRange(min=0, min_open=True), default=None,
              help="phaze: the one bandwidth (B/s) it plans with (default: the slowest tier's).")
@click.option("--rank-by", type=click.Choice(["separate", "effective"]), default="separate",
              show_default=True, help="SDP instances: keep the best plain and the best SDP "
              "plan apart (the plain one is the plan, SDP's when no plain plan fits), or "
              "name the better one by FLOP-equivalent time T_eff (docs/cost-model.md §6).")
@click.option("--json", "as_json", is_flag=True, help="Print the result record as JSON.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the plan here.")
def solve_command(instance_path: str, backend: str, space: str | None, time_limit: float,
                  work_limit: float | None, seed: int, workers: int, milp_solver: str, hint: bool,
                  degrees: tuple[int, ...], vp: int | None, recompute: str | None,
                  budget: int | None, chains: int | None, flat_bandwidth: float | None,
                  rank_by: str, as_json: bool, output: str | None) -> None:
    """Plan INSTANCE with one backend; exit 1 when no plan fits.

    --time-limit bounds the whole solve of cpsat and milp, counted from the start of
    nest-cp: loading the instance, the DP plan they start from (--hint, computed first),
    the search, and the referee's check, report and plan file after it (the search leaves
    them four times what the hint's check took, or without a hint an estimate from the
    device count).  The DP runs to its proven optimum unless --time-limit is given: then
    it stops half a second before the limit, counted the same way, with its best plan and
    a lower bound (docs/cli.md, "Time limits").  On an instance allowing SDP
    (training.strategies) the best plain and the best SDP plan are both reported; exit 0
    when either exists.
    """
    started = (click.get_current_context().obj or {}).get(PROCESS_STARTED, time.monotonic())
    honoured = HONOURED_OPTIONS[backend]
    for name, field in _SOLVE_OPTIONS.items():
        if field not in honoured:
            reject_options((name,), f"with --backend {backend}", flag=_FLAGS[field])
    if not math.isfinite(time_limit):
        raise click.BadParameter(f"expected a finite number of seconds, got {time_limit}",
                                 param_hint="--time-limit")
    if work_limit is not None and not math.isfinite(work_limit):
        raise click.BadParameter(f"expected a finite number of work units, got {work_limit}",
                                 param_hint="--work-limit")
    extra = {key: value for key, value in (
        ("degrees", degrees or None), ("virtual_stages", vp), ("recompute", recompute),
        ("budget", budget), ("chains", chains), ("flat_bandwidth_Bps", flat_bandwidth))
        if value is not None}
    if output is not None:
        check_writable(output, inputs=(instance_path,))
    inst = io.load_instance(instance_path)
    if backend == "dp" and click.get_current_context().get_parameter_source(
            "time_limit") is click.core.ParameterSource.COMMANDLINE:
        extra[STOP_AFTER_S] = max(
            time_limit - DP_AFTERWORK_S - (time.monotonic() - started), 0.0)
    chosen = Space(space) if space else (
        Space.FULL if backend in ("cpsat", "milp") else Space.STRUCTURED)
    hint_plan, sdp_hint, hint_s, hinted = None, None, None, None
    kept_back = AFTER_SEARCH_CHECKS * CHECK_S_PER_DEVICE * inst.cluster.num_devices
    if hint and "hint" in honoured:
        try:  # the hint's time counts against --time-limit, and stops at it
            left = max(time_limit - (time.monotonic() - started), MIN_TIME_LEFT_S)
            hinted = run_unrefereed(inst, "dp", SolveOptions(
                space=Space.STRUCTURED, time_limit_s=left, extra={STOP_AFTER_S: left}))
            checking = time.monotonic()
            check_result(inst, hinted)
            kept_back = AFTER_SEARCH_CHECKS * (time.monotonic() - checking)
            hint_plan = hinted.plan
            sdp_hint = hinted.sdp.plan if hinted.sdp is not None else None
        except BackendOptionError as exc:  # an instance the DP cannot search exactly: no hint
            click.echo(f"note: solving without the DP hint: {exc}", err=True)
        hint_s = time.monotonic() - started
    time_left = time_limit - (time.monotonic() - started) - kept_back
    try:
        options = SolveOptions(space=chosen, time_limit_s=max(time_left, MIN_TIME_LEFT_S),
                               seed=seed, workers=workers, milp_solver=milp_solver,
                               hint=hint_plan, sdp_hint=sdp_hint, work_limit=work_limit,
                               progress=sys.stderr.isatty(), extra=extra)
        result = run_unrefereed(inst, backend, options)
    except BackendOptionError as exc:
        if exc.option in _FLAGS:
            raise click.BadParameter(str(exc), param_hint=_FLAGS[exc.option]) from None
        raise
    evaluation = check_result(inst, result)  # the referee's, reused by the report
    if (note := context_note(inst, backend)) is not None:
        click.echo(f"note: {note}", err=True)
    result = _with_memory_reason(result, hinted)
    record = result_record(inst, result)
    chosen_plan = _chosen_plan(result, record, rank_by)
    if hint_s is not None:
        record["hint_wall_time_s"] = hint_s
    if work_limit is not None and hinted is not None and \
            hinted.status not in (Status.OPTIMAL, Status.INFEASIBLE):
        # the DP hint runs on the clock: stopped early, it (and so the answer) may differ
        record["wall_capped"] = True
    if output and chosen_plan is not None:  # before printing: `solve -o p.json | head` keeps it
        io.save_plan(chosen_plan, output)
    if as_json:
        click.echo(json.dumps(record, indent=1))
    else:
        click.echo(_result_table(record))
        if evaluation is not None:  # the plain plan's placement map (SDP's table is above)
            click.echo(plan_report(inst, evaluation))
    sys.exit(ExitCode.OK if chosen_plan is not None else ExitCode.NO_PLAN)


def _with_memory_reason(result: SolveResult, hinted: SolveResult | None) -> SolveResult:
    """An exact backend's proof that no plan fits, with the DP's "by how much at best".

    Memory does not depend on the placement, and every other choice is free in the DP's
    structured space too (DESIGN §4), so the least excess the DP measured is the full
    space's as well.  Only when both answers are INFEASIBLE (a disagreement stays visible).
    """
    if (hinted is None or result.status is not Status.INFEASIBLE
            or hinted.status is not Status.INFEASIBLE or result.sdp is not None
            or not hinted.message or hinted.message == result.message):
        return result
    return replace(result, message=hinted.message)


def _chosen_plan(result: SolveResult, record: dict, rank_by: str) -> Plan | None:
    """The plan ``-o`` writes: the plain one, the SDP one when no plain plan fits, or with
    ``--rank-by effective`` the one of least T_eff (a plain plan's T_eff is its T; ties go
    to the plain plan).  With ``effective`` the record says which one, ``better``."""
    sdp = result.sdp
    if sdp is None or sdp.plan is None:
        return result.plan
    if result.plan is None:
        chosen = "sdp"
    elif rank_by == "effective":
        chosen = "sdp" if sdp.effective < result.objective_ticks else "dp"
    else:
        chosen = "dp"
    if rank_by == "effective":
        record["ranked_by"] = "effective"
        record["better"] = chosen
    return sdp.plan if chosen == "sdp" else result.plan


def result_record(inst: Instance, result: SolveResult) -> dict:
    """The JSON form of a result: backend, status, objective, bound, time, throughput, plan."""
    seconds = throughput = None
    if result.objective_ticks is not None:
        seconds = result.objective_ticks * inst.training.tick_s
        throughput = cost.throughput(inst.training.global_batch, result.objective_ticks,
                                     inst.training.tick_s) if seconds else None
    record = {
        "backend": result.backend, "status": result.status.value, "space": result.space.value,
        "tolerance_rel": result.tolerance_rel,
        "objective_ticks": result.objective_ticks, "bound_ticks": result.bound_ticks,
        "iteration_time_s": seconds, "throughput_samples_per_s": throughput,
        "wall_time_s": result.wall_time_s, "message": result.message,
        "launcher": inst.training.launcher.value,
        "launcher_rules": rules_applied(inst.training.launcher, inst.search_facts),
        "plan": io.plan_to_dict(result.plan) if result.plan is not None else None,
    }
    if "layout" in result.stats and result.plan is not None:  # the DP's rank layout
        record["layout"] = result.stats["layout"]
    if "work_used" in result.stats:  # --work-limit: the work done, and whether the clock cut in
        record.update(work_units=result.stats["work_used"],
                      wall_capped=result.stats["wall_capped"])
    if result.sdp is not None:  # a plain plan's T_eff is its T, at coverage 1
        record.update(effective_ticks=result.objective_ticks, coverage="1",
                      memory_saved_bytes=0 if result.plan is not None else None)
        record["sdp"] = sdp_record(inst, result.sdp)
    return record


def sdp_record(inst: Instance, result: SolveResult) -> dict:
    """The JSON form of an SDP search's result (DESIGN §7): T, T_eff (rounded up and exact),
    its bound, coverage, memory saved against plain data parallelism, the worker graph."""
    record = result_record(inst, result)
    record.pop("bound_ticks")
    record.update(
        effective_ticks=math.ceil(result.effective) if result.effective is not None else None,
        effective_exact=str(result.effective) if result.effective is not None else None,
        effective_bound_ticks=math.floor(result.effective_bound)
        if result.effective_bound is not None else None,
        effective_bound_exact=str(result.effective_bound)
        if result.effective_bound is not None else None)
    for key in ("design", "layout"):
        if key in result.stats:
            record[key] = result.stats[key]
    if result.plan is not None:
        report = evaluate(inst, result.plan).sdp
        record.update(level=report.level.value, masking=report.masking.value,
                      holders=report.holders, workers=len(report.workers),
                      coverage=str(report.coverage), memory_bytes=report.memory_bytes,
                      plain_memory_bytes=report.plain_memory_bytes,
                      memory_saved_bytes=report.memory_saved_bytes,
                      algebraic_connectivity=report.algebraic_connectivity,
                      connected=report.connected)
    return record


def _bound_line(record: dict) -> str:
    """The proven lower bound, or 'none' for a backend that proves nothing (heuristics)."""
    bound = record["bound_ticks"]
    if bound is None:
        return "bound      none (this backend proves no lower bound)"
    gap = ""
    if record["objective_ticks"] and bound != record["objective_ticks"]:
        gap = f", gap at most {(record['objective_ticks'] - bound) / bound:.2%}" if bound else ""
    return f"bound      {bound} ticks{gap}"


def _result_table(record: dict) -> str:
    status = status_text(record["status"], record["tolerance_rel"])
    if record["tolerance_rel"] and record["status"] == Status.OPTIMAL.value:
        status += (f" (proven within the solver's relative tolerance "
                   f"{record['tolerance_rel']:g}; the bound is what it proved)")
    lines = [f"backend    {record['backend']} ({record['space']} space)",
             f"status     {status}"]
    if record.get("launcher", "none") != "none":
        lines.append(f"launcher   {record['launcher']}: searched only plans it starts as "
                     f"exported ({len(record['launcher_rules'])} rules)")
        lines += [f"  - {rule}" for rule in record["launcher_rules"]]
    if record["message"]:
        lines.append(f"message    {record['message']}")
    if record["objective_ticks"] is not None:
        lines += [f"objective  {record['objective_ticks']} ticks "
                  f"({record['iteration_time_s']:.6f} s/iteration, "
                  f"{rate(record['throughput_samples_per_s'], 2)} samples/s)",
                  _bound_line(record)]
        plan = record["plan"]
        marks = {"none": "", "selective": "+", "full": "*"}
        split = " | ".join(f"{s['first_layer']}-{s['last_layer']}{marks[s['recompute']]}"
                           for s in plan["stages"])
        virtual = plan["virtual_stages"]
        context = f" cp={plan['config']['cp']}" if plan["config"].get("cp", 1) > 1 else ""
        lines.append(f"plan       tp={plan['config']['tp']} ep={plan['config']['ep']}{context} "
                     f"microbatch={plan['microbatch']} zero={plan['zero']} "
                     f"stages={len(plan['stages']) // virtual} v={virtual} dp={plan['dp']}  "
                     f"[{split}] (* full, + selective recompute)")
    wall = f"wall time  {record['wall_time_s']:.3f} s"
    if record.get("hint_wall_time_s") is not None:
        wall += f" (after the DP hint: {record['hint_wall_time_s']:.3f} s)"
    lines.append(wall)
    if "sdp" in record:
        lines += _sdp_lines(record["sdp"])
    if "better" in record:
        lines.append(f"better by T_eff: {'SDP' if record['better'] == 'sdp' else 'plain'} plan")
    return "\n".join(lines)


def _sdp_lines(sdp: dict) -> list[str]:
    """The SDP search's part of the solve table (DESIGN §7)."""
    status = status_text(sdp["status"], sdp["tolerance_rel"])
    lines = ["", "SDP (subnetwork data parallelism; ranked by T_eff)",
             f"status     {status}"]
    if sdp["message"]:
        lines.append(f"message    {sdp['message']}")
    if sdp["objective_ticks"] is not None:
        bound = sdp["effective_bound_ticks"]
        lines += [f"objective  T = {sdp['objective_ticks']} ticks "
                  f"({sdp['iteration_time_s']:.6f} s/iteration), T_eff = "
                  f"{sdp['effective_ticks']} ticks (bound {bound})",
                  f"plan       tp={sdp['plan']['config']['tp']} ep={sdp['plan']['config']['ep']} "
                  f"microbatch={sdp['plan']['microbatch']} zero={sdp['plan']['zero']} "
                  f"recompute={sdp['plan']['stages'][0]['recompute']} d={sdp['workers']} "
                  f"h={sdp['holders']} (C = {sdp['coverage']}) {sdp['level']} level, "
                  f"{sdp['masking']} masking"
                  + (f", {sdp['design']} design on layout {sdp['layout']}"
                     if "design" in sdp else ""),
                  f"memory     {sdp['memory_bytes'] / 2**30:.2f} GiB per device, "
                  f"{sdp['memory_saved_bytes'] / 2**30:.2f} GiB below plain data parallelism",
                  "workers    algebraic connectivity "
                  + ("n/a" if sdp["algebraic_connectivity"] is None
                     else f"{sdp['algebraic_connectivity']:.4g}")
                  + (" (connected)" if sdp["connected"] else
                     " (disconnected: workers mix only through the shared parameters)")]
    lines.append(f"wall time  {sdp['wall_time_s']:.3f} s")
    return lines
