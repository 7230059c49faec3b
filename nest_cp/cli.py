"""The ``nest-cp`` command line: a thin click group over the public API.

The only place that wires the harness commands (``verify``, ``table``,
``compare``) and the launcher export (``export``) and drawing (``show``) in.
Exit codes follow the one contract of :mod:`nest_cp.exits`.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from dataclasses import replace
from pathlib import Path as FsPath

import click

from nest_cp import cost, io
from nest_cp.backends import BACKENDS, HONOURED_OPTIONS, solve
from nest_cp.compare import compare_command
from nest_cp.errors import BackendOptionError, InstanceFormatError, PlanFormatError
from nest_cp.evaluate import Evaluation, evaluate
from nest_cp.exits import ExitCode, GuardedGroup
from nest_cp.export import ExportFormat, export_plan, launch_table
from nest_cp.export.view import checked_evaluation
from nest_cp.model import Instance, IntraConfig
from nest_cp.plan import Plan, uniform_stages
from nest_cp.report import plan_report
from nest_cp.result import MAX_WORKERS, SolveOptions, SolveResult, Space, Status, status_text
from nest_cp.verify.cli import soak_command, table_command, verify_command


@click.group(cls=GuardedGroup)
@click.version_option(package_name="nest-cp")
@click.option("-v", "--verbose", count=True, help="Log progress (-v) or details (-vv).")
def main(verbose: int) -> None:
    """Plan distributed training: parallelism, memory and placement, certified."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


# ------------------------------------------------------------------ instance


@main.group()
def instance() -> None:
    """Create, list and inspect instances."""


@instance.command("list")
def instance_list() -> None:
    """List the preset models, devices and networks."""
    from nest_cp import presets

    for title, table in (("models", presets.MODELS), ("devices", presets.DEVICES),
                         ("networks", presets.NETWORKS)):
        click.echo(f"{title}:")
        for name, spec in table.items():
            click.echo(f"  {name:<22} {_describe(spec)}")


def _describe(spec: object) -> str:
    text = getattr(spec, "description", None)
    return text if isinstance(text, str) else ""


def _int_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...]:
    if value is None:
        return ()
    try:
        sizes = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"expected positive integers, got {value!r}")
    return sizes


@instance.command("new")
@click.option("--model", default=None, help="Preset model (see `instance list`).")
@click.option("--hf-config", "hf_config", default=None, type=click.Path(dir_okay=False),
              help="A Hugging Face config.json to profile instead of a preset model.")
@click.option("--devices", required=True, type=click.IntRange(min=1), help="Device count N.")
@click.option("--network", required=True, help="Preset network (see `instance list`).")
@click.option("--device", default=None,
              help="Preset device or device file (.json); default: the network's.")
@click.option("--global-batch", default=4096, show_default=True, type=click.IntRange(min=1))
@click.option("--seq-len", default=None, type=click.IntRange(min=1),
              help="Sequence length; default: the model's.")
@click.option("--microbatches", default="1", show_default=True, callback=_int_list,
              help="Allowed microbatch sizes, e.g. 1,2,4.")
@click.option("--attention", type=click.Choice(["flash", "materialized"]), default="flash",
              show_default=True, help="Attention kernel the profile assumes.")
@click.option("--sequence-parallel/--no-sequence-parallel", default=False, show_default=True,
              help="Megatron sequence parallelism with tensor parallelism.")
@click.option("--recompute-modes", default="none,full", show_default=True,
              help="Allowed recomputation modes (none, selective, full).")
@click.option("--virtual-stages", default="1", show_default=True, callback=_int_list,
              help="Allowed virtual-stage counts v of interleaved 1F1B, e.g. 1,2,4.")
@click.option("--overlap-grad-reduce/--no-overlap-grad-reduce", default=False,
              show_default=True, help="Gradient reduction overlaps the backward pass.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Instance file to write (.json or .yaml).")
def instance_new(model: str | None, hf_config: str | None, devices: int, network: str,
                 device: str | None, global_batch: int, seq_len: int | None,
                 microbatches: tuple[int, ...], attention: str, sequence_parallel: bool,
                 recompute_modes: str, virtual_stages: tuple[int, ...],
                 overlap_grad_reduce: bool, output: str) -> None:
    """Write an instance built with the analytic profiler from a preset or an HF config.

    The DP and exact backends search only the defaults of --recompute-modes,
    --virtual-stages and --overlap-grad-reduce; `evaluate` and `brute` take any.
    """

    from nest_cp import presets
    from nest_cp.hfconfig import spec_from_hf_config
    from nest_cp.model import RecomputeMode
    from nest_cp.profiler import AttentionKind, ProfileOptions

    if (model is None) == (hf_config is None):
        raise click.UsageError("expected exactly one of --model and --hf-config")
    chosen: object = model
    if hf_config is not None:
        try:
            chosen = spec_from_hf_config(io.read_document(hf_config),
                                         name=FsPath(hf_config).stem)
        except InstanceFormatError as exc:
            if exc.file is not None:
                raise
            raise InstanceFormatError(exc.detail, file=hf_config, field=exc.field) from None
    options = ProfileOptions(attention=AttentionKind(attention),
                             sequence_parallel=sequence_parallel)
    try:
        modes = tuple(RecomputeMode(part.strip()) for part in recompute_modes.split(",")
                      if part.strip())
    except ValueError:
        raise click.BadParameter(f"expected modes among none, selective, full, got "
                                 f"{recompute_modes!r}", param_hint="--recompute-modes") from None
    built = presets.build_instance(model=chosen, devices=devices, network=network,
                                   device=device, global_batch=global_batch, seq_len=seq_len,
                                   microbatches=microbatches, options=options,
                                   recompute_modes=modes)
    built = replace(built, training=replace(built.training, virtual_stages=virtual_stages,
                                            overlap_grad_reduce=overlap_grad_reduce))
    io.save_instance(built, output)
    click.echo(f"wrote {output}: {built.workload.num_layers} layers, "
               f"{built.cluster.num_devices} devices, {len(built.choices)} (config, microbatch) "
               f"choices")


@instance.command("show")
@click.argument("path", type=click.Path(dir_okay=False))
def instance_show(path: str) -> None:
    """Summarise an instance file."""
    inst = io.load_instance(path)
    click.echo(_instance_summary(inst))


def _instance_summary(inst: Instance) -> str:
    cluster, training, workload = inst.cluster, inst.training, inst.workload
    lines = [f"instance   {inst.name}",
             f"workload   {workload.name}: {workload.num_layers} layers, configs "
             + ", ".join(f"tp{c.tp}/ep{c.ep}" for c in workload.configs),
             f"cluster    {cluster.name}: {cluster.num_devices} devices, "
             f"{cluster.hbm_bytes / 2**30:.1f} GiB HBM (usable {cluster.usable_hbm_bytes} B)"]
    network = cluster.network
    if hasattr(network, "tiers"):
        for index, tier in enumerate(network.tiers):
            lines.append(f"  tier {index} {tier.name:<10} size {tier.size:<5} "
                         f"{tier.bandwidth_Bps / 1e9:>9.3f} GB/s  {tier.latency_s * 1e6:>8.2f} us")
    else:
        lines.append(f"  graph: {len(network.switches)} switches, {len(network.links)} links")
    opt = training.optimizer
    lines.append(f"training   batch {training.global_batch}, seq {training.seq_len}, microbatches "
                 f"{list(training.microbatches)}, ZeRO {list(training.zero_stages)}, recompute "
                 f"{'/'.join(m.value for m in training.recompute_modes)}, virtual stages "
                 f"{list(training.virtual_stages)}, overlap grad reduce "
                 f"{'on' if training.overlap_grad_reduce else 'off'}, optimizer "
                 f"{opt.weight_bytes}/{opt.grad_bytes}/{opt.state_bytes} B/param, "
                 f"tick {training.tick_s} s")
    return "\n".join(lines)


# ------------------------------------------------------------------ evaluate


@main.command("evaluate")
@click.argument("instance_path", metavar="INSTANCE", type=click.Path(dir_okay=False))
@click.argument("plan_path", metavar="[PLAN]", required=False, type=click.Path(dir_okay=False))
@click.option("--pp", type=click.IntRange(min=1), help="Without PLAN: pipeline depth p.")
@click.option("--dp", "dp_degree", type=click.IntRange(min=1), help="Without PLAN: replicas d.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--microbatch", "--mbs", "microbatch", type=click.IntRange(min=1), default=1,
              show_default=True)
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True)
@click.option("--vp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Without PLAN: virtual stages v (interleaved 1F1B; S*v chunks).")
@click.option("--recompute", type=click.Choice(["none", "selective", "full", "all-but-last"]),
              default="none", show_default=True,
              help="Without PLAN: every stage's mode, or full on all stages but the last.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def evaluate_command(instance_path: str, plan_path: str | None, pp: int | None,
                     dp_degree: int | None, tp: int, ep: int, microbatch: int, zero: int,
                     vp: int, recompute: str, as_json: bool) -> None:
    """Evaluate PLAN (a plan file) or a uniform plan given by --pp/--dp/--tp on INSTANCE.

    Exit 0 when the plan fits, 1 when it breaks memory, 2 when it does not fit the
    instance at all (unknown configuration, bad split or placement).
    """
    degree_options = ("pp", "dp_degree", "tp", "ep", "microbatch", "zero", "vp", "recompute")
    if plan_path is not None:
        _reject_options(degree_options, "with a PLAN file")
    inst = io.load_instance(instance_path)
    if plan_path is not None:
        plan = io.load_plan(plan_path)
    elif pp is not None and dp_degree is not None:
        if pp * vp > inst.workload.num_layers:
            raise click.BadParameter(f"expected --pp x --vp <= {inst.workload.num_layers} "
                                     f"layers, got {pp} x {vp}", param_hint="--pp")
        plan = Plan(IntraConfig(tp, ep), microbatch, zero, dp_degree,
                    uniform_stages(inst.workload.num_layers, pp, recompute, vp),
                    virtual_stages=vp)
        inst = _admit_choices(inst, plan)
    else:
        raise click.UsageError("expected a PLAN file or both --pp and --dp")
    evaluation = evaluate(inst, plan)
    if evaluation.malformed_fields:
        if plan_path is None:
            raise click.UsageError(f"the plan from the options does not fit the instance: "
                                   f"{evaluation.violations[0]}")
        raise PlanFormatError(f"expected a plan that fits the instance: "
                              f"{evaluation.violations[0]}", file=plan_path,
                              field=evaluation.malformed_fields[0])
    peak = inst.cluster.peak_flops_per_s
    if as_json:
        data = evaluation.as_dict()
        data["tflops_per_gpu"] = (None if evaluation.mfu is None or peak is None
                                  else evaluation.mfu * peak / 1e12)
        click.echo(json.dumps(data, indent=1))
    else:
        click.echo(_evaluation_table(inst, evaluation, peak))
    sys.exit(ExitCode.OK if evaluation.feasible else ExitCode.NO_PLAN)


def _admit_choices(inst: Instance, plan: Plan) -> Instance:
    """The instance with its search space widened to the ZeRO stage, virtual stages and
    recomputation modes a what-if plan from the command line asks for (a note says which).

    The allowed lists bound what the solvers search; a plan the user spells out is
    priced by the same cost model whether or not a solver would have searched it.
    Microbatch sizes and intra-layer configurations are not widened: they need profiles.
    """
    training = inst.training
    modes = tuple(dict.fromkeys(stage.recompute for stage in plan.stages))
    added = {"ZeRO stage": [plan.zero] if plan.zero not in training.zero_stages else [],
             "virtual stages": ([plan.virtual_stages]
                                if plan.virtual_stages not in training.virtual_stages else []),
             "recompute": [m.value for m in modes if m not in training.recompute_modes]}
    added = {name: values for name, values in added.items() if values}
    if not added:
        return inst
    click.echo("note: evaluating outside the instance's search space ("
               + ", ".join(f"{name} {', '.join(map(str, values))}"
                           for name, values in added.items()) + ")", err=True)
    widened = replace(training,
                      zero_stages=tuple(sorted({*training.zero_stages, plan.zero})),
                      virtual_stages=tuple(sorted({*training.virtual_stages,
                                                   plan.virtual_stages})),
                      recompute_modes=tuple(dict.fromkeys((*training.recompute_modes,
                                                           *modes))))
    return replace(inst, training=widened)


def _reject_options(names: tuple[str, ...], context: str, flag: str | None = None) -> None:
    """UsageError when any of ``names`` was given on the command line (it would be ignored)."""
    ctx = click.get_current_context()
    given = [flag or f"--{name.removesuffix('_degree').replace('_', '-')}" for name in names
             if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(f"{', '.join(given)} cannot be used {context}")


def _evaluation_table(inst: Instance, evaluation: Evaluation,
                      peak_flops_per_s: float | None = None) -> str:
    if evaluation.sdp is not None:
        return _sdp_evaluation_table(evaluation)
    plan = evaluation.plan
    head = (f"plan: tp={plan.config.tp} ep={plan.config.ep} microbatch={plan.microbatch} "
            f"zero={plan.zero} stages={plan.num_stages} v={plan.virtual_stages} "
            f"dp={plan.num_replicas} ({plan.num_devices_used} devices)")
    if evaluation.objective_ticks is None:
        return "\n".join([head, "not evaluable:"] + [f"  - {v}" for v in evaluation.violations])
    tick_ms = inst.training.tick_s * 1e3
    tau = "tau_chunk" if plan.virtual_stages > 1 else "tau_max"
    rows = [head, plan_report(inst, evaluation),
            f"microbatches per replica m = {evaluation.num_microbatches}, "
            f"{tau} = {evaluation.tau_max_ticks} ticks ({evaluation.tau_max_ticks * tick_ms:.3f}"
            f" ms), T_sync = {evaluation.exposed_sync_ticks} ticks exposed of "
            f"{evaluation.sync_ticks} ({evaluation.exposed_sync_ticks * tick_ms:.3f} ms of "
            f"{evaluation.sync_ticks * tick_ms:.3f} ms)",
            f"iteration {evaluation.objective_ticks} ticks = {evaluation.iteration_time_s:.6f} s, "
            f"{_rate(evaluation.throughput_samples_per_s, 2)} samples/s, "
            f"{_rate(evaluation.throughput_tokens_per_s, 0)} tokens/s, "
            f"{_tflops(evaluation.mfu, peak_flops_per_s)} TF/s per GPU (model FLOPs), "
            f"MFU {_percent(evaluation.mfu)}, HFU {_percent(evaluation.hfu)}",
            "feasible" if evaluation.feasible else "INFEASIBLE:"]
    rows += [f"  - {v}" for v in evaluation.violations]
    return "\n".join(rows)


def _sdp_evaluation_table(evaluation: Evaluation) -> str:
    """An SDP plan (DESIGN §7): one row per worker, then T, T_eff and the memory saved."""
    plan, report = evaluation.plan, evaluation.sdp
    head = (f"plan: SDP {report.level.value} level, {report.masking.value} masking, "
            f"h={report.holders} of d={len(report.workers)} workers (C = {report.coverage}), "
            f"tp={plan.config.tp} ep={plan.config.ep} microbatch={plan.microbatch} "
            f"zero={plan.zero} recompute={plan.stages[0].recompute.value} "
            f"({plan.num_devices_used} devices)")
    rows = [head, f"{'workers':>11} {'units':>5} {'time':>12} {'compute':>12} "
                  f"{'recompute':>10} {'coll':>10} {'sync':>12} {'exposed':>12} {'mem GiB':>8} "
                  f"{'fits':>4}"]
    runs: list[list] = []  # consecutive workers with equal numbers share a row
    for w in report.workers:
        cells = (w.units, w.time_ticks, w.compute_ticks, w.recompute_ticks, w.collective_ticks,
                 w.sync_ticks, w.exposed_sync_ticks, w.memory_bytes)
        if runs and runs[-1][2] == cells:
            runs[-1][1] = w.worker
        else:
            runs.append([w.worker, w.worker, cells])
    for first, last, (units, time_, compute, rerun, coll, sync, exposed, memory) in runs:
        label = str(first) if first == last else f"{first}-{last}"
        rows.append(f"{label:>11} {units:>5} {time_:>12} {compute:>12} {rerun:>10} {coll:>10} "
                    f"{sync:>12} {exposed:>12} {memory / 2**30:>8.2f} "
                    f"{'yes' if memory <= report.memory_limit_bytes else 'NO':>4}")
    connectivity = "n/a" if report.algebraic_connectivity is None else \
        f"{report.algebraic_connectivity:.4g}"
    rows += [f"microbatches per worker m = {evaluation.num_microbatches}, tau_max = "
             f"{evaluation.tau_max_ticks} ticks, T_sync = {evaluation.exposed_sync_ticks} ticks "
             f"exposed of {evaluation.sync_ticks}",
             f"iteration {evaluation.objective_ticks} ticks = {evaluation.iteration_time_s:.6f} s,"
             f" T_eff = {report.effective_ticks} ticks (exactly {report.effective}; "
             f"C_full = {report.full_compute_ticks} ticks), MFU n/a for SDP",
             f"memory {report.memory_bytes / 2**30:.2f} GiB per device, plain data parallelism "
             f"{report.plain_memory_bytes / 2**30:.2f} GiB: {report.memory_saved_bytes} bytes "
             f"saved; worker graph algebraic connectivity {connectivity}"
             f"{'' if report.connected else ' (disconnected)'}",
             "feasible" if evaluation.feasible else "INFEASIBLE:"]
    rows += [f"  - {v}" for v in evaluation.violations]
    return "\n".join(rows)


# ------------------------------------------------------------------ solve

MIN_TIME_LEFT_S = 0.01  # what an exact backend still gets when the DP hint used the limit up


# solve's options that map to a SolveOptions field or extra key a backend may not honour
_SOLVE_OPTIONS = {"space": "space", "time_limit": "time_limit_s", "seed": "seed",
                  "workers": "workers", "hint": "hint", "milp_solver": "milp_solver",
                  "degrees": "degrees", "vp": "virtual_stages", "recompute": "recompute",
                  "budget": "budget", "chains": "chains", "flat_bandwidth": "flat_bandwidth_Bps",
                  "rank_by": "rank_by"}
_FLAGS = {field: f"--{name.replace('_', '-')}" for name, field in _SOLVE_OPTIONS.items()}
_FLAGS["hint"] = "--hint/--no-hint"


@main.command("solve")
@click.argument("instance_path", metavar="INSTANCE", type=click.Path(dir_okay=False))
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="dp", show_default=True)
@click.option("--space", type=click.Choice([s.value for s in Space]), default=None,
              help="Search space (default: structured for dp, full for exact backends).")
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, help="cpsat/milp/mcmc: seconds for the whole solve (the "
              "DP hint included).")
@click.option("--seed", type=int, default=0, show_default=True, help="cpsat/milp/mcmc.")
@click.option("--workers", type=click.IntRange(1, MAX_WORKERS), default=1, show_default=True,
              help="cpsat/milp: solver threads.")
@click.option("--milp-solver", type=click.Choice(["cbc", "highs"]), default="cbc",
              show_default=True)
@click.option("--hint/--no-hint", default=True, show_default=True,
              help="cpsat/milp: start from the DP plan (hint / warm start).")
@click.option("--degrees", callback=_int_list, default=None,
              help="fixed: p,d,t[,e] (pipeline, data, tensor[, expert] degrees).")
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
              "name the better one by FLOP-equivalent time T_eff (DESIGN §7).")
@click.option("--json", "as_json", is_flag=True, help="Print the result record as JSON.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the plan here.")
def solve_command(instance_path: str, backend: str, space: str | None, time_limit: float,
                  seed: int, workers: int, milp_solver: str, hint: bool,
                  degrees: tuple[int, ...], vp: int | None, recompute: str | None,
                  budget: int | None, chains: int | None, flat_bandwidth: float | None,
                  rank_by: str, as_json: bool, output: str | None) -> None:
    """Plan INSTANCE with one backend; exit 1 when no plan fits.

    --time-limit bounds the whole solve of cpsat and milp: the DP plan they start
    from (--hint) is computed first and its time counts against the limit.  On an
    instance allowing SDP (training.strategies) the best plain and the best SDP plan
    are both reported; exit 0 when either exists.
    """
    honoured = HONOURED_OPTIONS[backend]
    for name, field in _SOLVE_OPTIONS.items():
        if field not in honoured:
            _reject_options((name,), f"with --backend {backend}", flag=_FLAGS[field])
    if not math.isfinite(time_limit):
        raise click.BadParameter(f"expected a finite number of seconds, got {time_limit}",
                                 param_hint="--time-limit")
    extra = {key: value for key, value in (
        ("degrees", degrees or None), ("virtual_stages", vp), ("recompute", recompute),
        ("budget", budget), ("chains", chains), ("flat_bandwidth_Bps", flat_bandwidth))
        if value is not None}
    if output is not None:
        _check_writable(output)
    inst = io.load_instance(instance_path)
    started = time.monotonic()
    chosen = Space(space) if space else (
        Space.FULL if backend in ("cpsat", "milp") else Space.STRUCTURED)
    hint_plan, sdp_hint, hint_s, hinted = None, None, None, None
    if hint and "hint" in honoured:
        try:
            hinted = solve(inst, "dp", SolveOptions(space=Space.STRUCTURED))
            hint_plan = hinted.plan
            sdp_hint = hinted.sdp.plan if hinted.sdp is not None else None
        except BackendOptionError as exc:  # an instance the DP cannot search exactly: no hint
            click.echo(f"note: solving without the DP hint: {exc}", err=True)
        hint_s = time.monotonic() - started
    time_left = time_limit - (time.monotonic() - started)
    try:
        options = SolveOptions(space=chosen, time_limit_s=max(time_left, MIN_TIME_LEFT_S),
                               seed=seed, workers=workers, milp_solver=milp_solver,
                               hint=hint_plan, sdp_hint=sdp_hint,
                               progress=sys.stderr.isatty(), extra=extra)
        result = solve(inst, backend, options)
    except BackendOptionError as exc:
        if exc.option in _FLAGS:
            raise click.BadParameter(str(exc), param_hint=_FLAGS[exc.option]) from None
        raise
    result = _with_memory_reason(result, hinted)
    record = result_record(inst, result)
    chosen_plan = _chosen_plan(result, record, rank_by)
    if hint_s is not None:
        record["hint_wall_time_s"] = hint_s
    if as_json:
        click.echo(json.dumps(record, indent=1))
    else:
        click.echo(_result_table(record))
        if result.plan is not None:  # the plain plan's placement map (SDP's table is above)
            click.echo(plan_report(inst, evaluate(inst, result.plan)))
    if output and chosen_plan is not None:
        io.save_plan(chosen_plan, output)
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


def _check_writable(output: str) -> None:
    """Fail before a long solve, not after it, when the plan could not be written."""
    folder = FsPath(output).resolve().parent
    if not folder.is_dir():
        raise BackendOptionError(f"{output}: expected an output path in an existing folder, "
                                 f"got missing folder {folder}")


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
        "plan": io.plan_to_dict(result.plan) if result.plan is not None else None,
    }
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


def _tflops(mfu: float | None, peak_flops_per_s: float | None) -> str:
    """Model TF/s per GPU (MFU x peak), or n/a where either is unknown."""
    if mfu is None or peak_flops_per_s is None:
        return "n/a"
    return f"{mfu * peak_flops_per_s / 1e12:.1f}"


def _percent(value: float | None) -> str:
    """A utilisation as a percentage, or n/a where FLOPs or the device peak are unknown."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _rate(value: float | None, digits: int) -> str:
    """A throughput, or n/a for a zero-time iteration (a profile with no costs)."""
    return "n/a" if value is None else f"{value:.{digits}f}"


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
    if record["message"]:
        lines.append(f"message    {record['message']}")
    if record["objective_ticks"] is not None:
        lines += [f"objective  {record['objective_ticks']} ticks "
                  f"({record['iteration_time_s']:.6f} s/iteration, "
                  f"{_rate(record['throughput_samples_per_s'], 2)} samples/s)",
                  _bound_line(record)]
        plan = record["plan"]
        marks = {"none": "", "selective": "+", "full": "*"}
        split = " | ".join(f"{s['first_layer']}-{s['last_layer']}{marks[s['recompute']]}"
                           for s in plan["stages"])
        virtual = plan["virtual_stages"]
        lines.append(f"plan       tp={plan['config']['tp']} ep={plan['config']['ep']} "
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


# ------------------------------------------------------------------ export and show


@main.command("export")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--instance", "instance_path", required=True, type=click.Path(dir_okay=False),
              help="The instance the plan was made for.")
@click.option("--format", "fmt", required=True,
              type=click.Choice([f.value for f in ExportFormat]),
              help="Target launcher.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the launcher file here instead of stdout.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=None,
              help="GPUs of one host (default: the innermost tier's size; required on a "
                   "graph network).")
@click.option("--rank-map", "rank_map_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the launch table (node rank, host, CUDA_VISIBLE_DEVICES, "
                   "global ranks) here.")
@click.option("--json", "as_json", is_flag=True,
              help="Print everything as JSON: arguments or config, warnings, rank map.")
def export_command(plan_path: str, instance_path: str, fmt: str, output: str | None,
                   gpus_per_node: int | None, rank_map_path: str | None,
                   as_json: bool) -> None:
    """Export PLAN as Megatron-LM arguments, a torchtitan TOML or a DeepSpeed JSON.

    Whatever the target cannot express is a warning on stderr (and in --json's
    "warnings"), never dropped.
    """
    for path in (output, rank_map_path):
        if path is not None:
            _check_writable(path)
    inst = io.load_instance(instance_path)
    result = export_plan(inst, io.load_plan(plan_path), fmt, gpus_per_node, plan_path)
    if output is not None:
        FsPath(output).write_text(result.text, encoding="utf-8")
    if rank_map_path is not None:
        FsPath(rank_map_path).write_text(
            "\n".join(launch_table(result.rank_map, comment="#")) + "\n", encoding="utf-8")
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=1))
    elif output is None:
        click.echo(result.text, nl=False)
    else:
        click.echo(f"wrote {output}")
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)


@main.command("show")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--instance", "instance_path", required=True, type=click.Path(dir_okay=False),
              help="The instance the plan was made for.")
@click.option("--png", type=click.Path(dir_okay=False), default=None,
              help="Draw the placement and the per-stage time and memory to this PNG.")
def show_command(plan_path: str, instance_path: str, png: str | None) -> None:
    """Print PLAN's placement map and stage table; draw them with --png."""
    if png is not None:
        _check_writable(png)
    inst = io.load_instance(instance_path)
    evaluation = checked_evaluation(inst, io.load_plan(plan_path), plan_path)
    click.echo(plan_report(inst, evaluation))
    if png is not None:
        from nest_cp.show import draw_plan

        draw_plan(inst, evaluation, png)
        click.echo(f"wrote {png}")
    if not evaluation.feasible:
        click.echo(f"INFEASIBLE: {evaluation.violations[0]}", err=True)
    sys.exit(ExitCode.OK if evaluation.feasible else ExitCode.NO_PLAN)


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


# ------------------------------------------------------------------ calibrate


@main.command("calibrate")
@click.argument("measurements", type=click.Path(dir_okay=False))
@click.option("--base", default=None,
              help="Device to start from (preset or file); default: the rows' device.")
@click.option("--name", default=None, help="Name of the calibrated device (default BASE-cal).")
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="Device file to write (default: BASE-calibrated.json beside the CSV).")
def calibrate_command(measurements: str, base: str | None, name: str | None,
                      output: str | None) -> None:
    """Fit a device's kernel efficiencies to MEASUREMENTS.csv (measured training runs).

    Prints the fit, every row's residual and the parameters the data did not constrain,
    and writes a device file instances can name as their device. Exit 1 when the data
    constrain no parameter (nothing is written).
    """

    from nest_cp import calibrate as cal
    from nest_cp.devicefile import save_device
    from nest_cp.presets import MEGATRON_ADAM, NETWORKS, resolve_device

    rows = cal.read_measurements(measurements)
    folder = FsPath(measurements).parent
    if base is None:
        names = {row.device or NETWORKS[row.run.network].default_device
                 for row in rows if row.run.network in NETWORKS}
        if len(names) > 1:
            raise InstanceFormatError(f"expected one device for every row (or --base), got "
                                      f"{', '.join(sorted(names))}", file=measurements,
                                      field="device")
        base = names.pop() if names else None
    for row in rows:
        if row.run.network not in NETWORKS:
            raise InstanceFormatError(f"expected a preset network ({', '.join(NETWORKS)}), got "
                                      f"{row.run.network!r}", file=measurements,
                                      field=f"row {row.row}.network")
    base_device = resolve_device(base, folder)
    result = cal.calibrate(rows, base_device, MEGATRON_ADAM)
    click.echo(cal.report(result))
    if not result.fitted:
        click.echo("no efficiency parameter is constrained by these rows: nothing written")
        sys.exit(ExitCode.NO_PLAN)
    device = replace(result.device, name=name or f"{base_device.name}-cal")
    target = output or str(folder / f"{base_device.name}-calibrated.json")
    save_device(device, target, result.calibration_record(str(measurements)))
    click.echo(f"wrote {target}")


# ------------------------------------------------------------------ harness commands

main.add_command(verify_command)
main.add_command(table_command)
main.add_command(compare_command)
main.add_command(soak_command)


if __name__ == "__main__":  # pragma: no cover
    main()
