"""The ``nest-cp`` command line: a thin click group over the public API.

The only place that wires the harness commands (``verify``, ``table``,
``compare``) in.  Exit codes follow the one contract of :mod:`nest_cp.exits`.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path as FsPath

import click

from nest_cp import cost, io
from nest_cp.backends import BACKENDS, HONOURED_OPTIONS, solve
from nest_cp.compare import compare_command
from nest_cp.errors import BackendOptionError, PlanFormatError
from nest_cp.evaluate import Evaluation, evaluate
from nest_cp.exits import ExitCode, GuardedGroup
from nest_cp.model import Instance, IntraConfig
from nest_cp.plan import Plan, uniform_stages
from nest_cp.result import MAX_WORKERS, SolveOptions, SolveResult, Space, Status, status_text
from nest_cp.verify.cli import table_command, verify_command


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
@click.option("--model", required=True, help="Preset model (see `instance list`).")
@click.option("--devices", required=True, type=click.IntRange(min=1), help="Device count N.")
@click.option("--network", required=True, help="Preset network (see `instance list`).")
@click.option("--device", default=None, help="Preset device; default: the network's.")
@click.option("--global-batch", default=4096, show_default=True, type=click.IntRange(min=1))
@click.option("--seq-len", default=None, type=click.IntRange(min=1),
              help="Sequence length; default: the model's.")
@click.option("--microbatches", default="1", show_default=True, callback=_int_list,
              help="Allowed microbatch sizes, e.g. 1,2,4.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Instance file to write (.json or .yaml).")
def instance_new(model: str, devices: int, network: str, device: str | None, global_batch: int,
                 seq_len: int | None, microbatches: tuple[int, ...], output: str) -> None:
    """Write an instance built from presets with the analytic profiler."""
    from nest_cp import presets

    built = presets.build_instance(model=model, devices=devices, network=network, device=device,
                                   global_batch=global_batch, seq_len=seq_len,
                                   microbatches=microbatches)
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
@click.option("--microbatch", type=click.IntRange(min=1), default=1, show_default=True)
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
    if as_json:
        click.echo(json.dumps(evaluation.as_dict(), indent=1))
    else:
        click.echo(_evaluation_table(evaluation))
    sys.exit(ExitCode.OK if evaluation.feasible else ExitCode.NO_PLAN)


def _reject_options(names: tuple[str, ...], context: str, flag: str | None = None) -> None:
    """UsageError when any of ``names`` was given on the command line (it would be ignored)."""
    ctx = click.get_current_context()
    given = [flag or f"--{name.removesuffix('_degree').replace('_', '-')}" for name in names
             if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(f"{', '.join(given)} cannot be used {context}")


def _evaluation_table(evaluation: Evaluation) -> str:
    plan = evaluation.plan
    head = (f"plan: tp={plan.config.tp} ep={plan.config.ep} microbatch={plan.microbatch} "
            f"zero={plan.zero} stages={plan.num_stages} v={plan.virtual_stages} "
            f"dp={plan.num_replicas} ({plan.num_devices_used} devices)")
    if evaluation.objective_ticks is None:
        return "\n".join([head, "not evaluable:"] + [f"  - {v}" for v in evaluation.violations])
    rows = [head,
            f"{'stage':>5} {'layers':>9} {'recompute':>9} {'k':>3} {'time':>12} {'compute':>12} "
            f"{'coll':>10} {'recv':>10} {'zero3':>10} {'sync':>12} {'exposed':>12} "
            f"{'mem GiB':>8} {'fits':>4}"]
    for s in evaluation.stages:
        layers = ",".join(f"{c.first_layer}-{c.last_layer}" for c in s.chunks)
        rows.append(
            f"{s.index:>5} {layers:>9} {s.recompute.value:>9} {s.in_flight:>3} "
            f"{s.time_ticks:>12} {s.compute_ticks + s.recompute_ticks:>12} "
            f"{s.collective_ticks:>10} {s.recv_activation_ticks + s.recv_gradient_ticks:>10} "
            f"{s.zero_gather_ticks:>10} {s.sync_ticks:>12} {s.exposed_sync_ticks:>12} "
            f"{s.memory_bytes / 2**30:>8.2f} {'yes' if s.fits else 'NO':>4}")
    tau = "tau_chunk" if plan.virtual_stages > 1 else "tau_max"
    rows += [f"microbatches per replica m = {evaluation.num_microbatches}, "
             f"{tau} = {evaluation.tau_max_ticks} ticks, T_sync = "
             f"{evaluation.exposed_sync_ticks} ticks exposed of {evaluation.sync_ticks}",
             f"iteration {evaluation.objective_ticks} ticks = {evaluation.iteration_time_s:.6f} s, "
             f"{_rate(evaluation.throughput_samples_per_s, 2)} samples/s, "
             f"{_rate(evaluation.throughput_tokens_per_s, 0)} tokens/s, "
             f"MFU {_percent(evaluation.mfu)}, HFU {_percent(evaluation.hfu)}",
             "feasible" if evaluation.feasible else "INFEASIBLE:"]
    rows += [f"  - {v}" for v in evaluation.violations]
    return "\n".join(rows)


# ------------------------------------------------------------------ solve

MIN_TIME_LEFT_S = 0.01  # what an exact backend still gets when the DP hint used the limit up


# solve's options that map to a SolveOptions field or extra key a backend may not honour
_SOLVE_OPTIONS = {"space": "space", "time_limit": "time_limit_s", "seed": "seed",
                  "workers": "workers", "hint": "hint", "milp_solver": "milp_solver",
                  "degrees": "degrees", "budget": "budget", "chains": "chains",
                  "flat_bandwidth": "flat_bandwidth_Bps"}
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
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="mcmc: proposals in total (default 2000).")
@click.option("--chains", type=click.IntRange(min=1), default=None,
              help="mcmc: independent chains (default 4).")
@click.option("--flat-bandwidth", type=click.FloatRange(min=0, min_open=True), default=None,
              help="phaze: the one bandwidth (B/s) it plans with (default: the slowest tier's).")
@click.option("--json", "as_json", is_flag=True, help="Print the result record as JSON.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the plan here.")
def solve_command(instance_path: str, backend: str, space: str | None, time_limit: float,
                  seed: int, workers: int, milp_solver: str, hint: bool,
                  degrees: tuple[int, ...], budget: int | None, chains: int | None,
                  flat_bandwidth: float | None, as_json: bool, output: str | None) -> None:
    """Plan INSTANCE with one backend; exit 1 when no plan fits.

    --time-limit bounds the whole solve of cpsat and milp: the DP plan they start
    from (--hint) is computed first and its time counts against the limit.
    """
    honoured = HONOURED_OPTIONS[backend]
    for name, field in _SOLVE_OPTIONS.items():
        if field not in honoured:
            _reject_options((name,), f"with --backend {backend}", flag=_FLAGS[field])
    if not math.isfinite(time_limit):
        raise click.BadParameter(f"expected a finite number of seconds, got {time_limit}",
                                 param_hint="--time-limit")
    extra = {key: value for key, value in (
        ("degrees", degrees or None), ("budget", budget), ("chains", chains),
        ("flat_bandwidth_Bps", flat_bandwidth)) if value is not None}
    if output is not None:
        _check_writable(output)
    inst = io.load_instance(instance_path)
    started = time.monotonic()
    chosen = Space(space) if space else (
        Space.FULL if backend in ("cpsat", "milp") else Space.STRUCTURED)
    hint_plan, hint_s = None, None
    if hint and "hint" in honoured:
        try:
            hinted = solve(inst, "dp", SolveOptions(space=Space.STRUCTURED))
            hint_plan = hinted.plan
        except BackendOptionError:  # an instance the DP cannot search exactly: no hint
            hint_plan = None
        hint_s = time.monotonic() - started
    time_left = time_limit - (time.monotonic() - started)
    try:
        options = SolveOptions(space=chosen, time_limit_s=max(time_left, MIN_TIME_LEFT_S),
                               seed=seed, workers=workers, milp_solver=milp_solver,
                               hint=hint_plan, progress=sys.stderr.isatty(), extra=extra)
        result = solve(inst, backend, options)
    except BackendOptionError as exc:
        if exc.option in _FLAGS:
            raise click.BadParameter(str(exc), param_hint=_FLAGS[exc.option]) from None
        raise
    record = result_record(inst, result)
    if hint_s is not None:
        record["hint_wall_time_s"] = hint_s
    if as_json:
        click.echo(json.dumps(record, indent=1))
    else:
        click.echo(_result_table(record))
    if output and result.plan is not None:
        io.save_plan(result.plan, output)
    sys.exit(ExitCode.OK if result.plan is not None else ExitCode.NO_PLAN)


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
    return {
        "backend": result.backend, "status": result.status.value, "space": result.space.value,
        "tolerance_rel": result.tolerance_rel,
        "objective_ticks": result.objective_ticks, "bound_ticks": result.bound_ticks,
        "iteration_time_s": seconds, "throughput_samples_per_s": throughput,
        "wall_time_s": result.wall_time_s, "message": result.message,
        "plan": io.plan_to_dict(result.plan) if result.plan is not None else None,
    }


def _percent(value: float | None) -> str:
    """A utilisation as a percentage, or n/a where FLOPs or the device peak are unknown."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _rate(value: float | None, digits: int) -> str:
    """A throughput, or n/a for a zero-time iteration (a profile with no costs)."""
    return "n/a" if value is None else f"{value:.{digits}f}"


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
                  f"bound      {record['bound_ticks']} ticks"]
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
    return "\n".join(lines)


# ------------------------------------------------------------------ harness commands

main.add_command(verify_command)
main.add_command(table_command)
main.add_command(compare_command)


if __name__ == "__main__":  # pragma: no cover
    main()
