"""``nest-cp evaluate``: price a plan (a file, or degrees spelled out) with the evaluator."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace

import click

from nest_cp import io
from nest_cp.cli.options import percent, rate, reject_options, tflops
from nest_cp.cli.report import plan_report
from nest_cp.cost import terms
from nest_cp.cost.evaluate import Evaluation, StageReport, evaluate
from nest_cp.model.errors import PlanFormatError
from nest_cp.model.exits import ExitCode
from nest_cp.model.instance import Instance, IntraConfig, RecomputeMode
from nest_cp.model.plan import Plan, Stage, uniform_stages


@click.command("evaluate")
@click.argument("instance_path", metavar="INSTANCE", type=click.Path(dir_okay=False))
@click.argument("plan_path", metavar="[PLAN]", required=False, type=click.Path(dir_okay=False))
@click.option("--pp", type=click.IntRange(min=1), help="Without PLAN: pipeline depth p.")
@click.option("--dp", "dp_degree", type=click.IntRange(min=1), help="Without PLAN: replicas d.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--cp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Without PLAN: context width c (docs/context-parallelism.md).")
@click.option("--microbatch", "--mbs", "microbatch", type=click.IntRange(min=1), default=1,
              show_default=True)
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True)
@click.option("--vp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Without PLAN: virtual stages v (interleaved 1F1B; S*v chunks).")
@click.option("--recompute", type=click.Choice(["none", "selective", "full", "all-but-last"]),
              default="none", show_default=True,
              help="Without PLAN: every stage's mode, or full on all stages but the last.")
@click.option("--split", type=click.Choice(["auto", "megatron", "even"]), default="auto",
              show_default=True,
              help="Without PLAN: megatron = blocks evenly over the pp x vp chunks, the "
                   "embedding with the first and the head with the last (Megatron-LM); even = "
                   "every layer of the chain alike; auto = megatron when the chain is "
                   "embedding, blocks, head.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def evaluate_command(instance_path: str, plan_path: str | None, pp: int | None,
                     dp_degree: int | None, tp: int, ep: int, cp: int, microbatch: int,
                     zero: int, vp: int, recompute: str, split: str, as_json: bool) -> None:
    """Evaluate PLAN (a plan file) or a uniform plan given by --pp/--dp/--tp on INSTANCE.

    Exit 0 when the plan fits, 1 when it breaks memory, 2 when it does not fit the
    instance at all (unknown configuration, bad split or placement).
    """
    degree_options = ("pp", "dp_degree", "tp", "ep", "cp", "microbatch", "zero", "vp",
                      "recompute", "split")
    if plan_path is not None:
        reject_options(degree_options, "with a PLAN file")
    inst = io.load_instance(instance_path)
    if plan_path is not None:
        plan = io.load_plan(plan_path)
    elif pp is not None and dp_degree is not None:
        plan = Plan(IntraConfig(tp, ep, cp), microbatch, zero, dp_degree,
                    _split_stages(inst, pp, vp, recompute, split), virtual_stages=vp)
        inst = _admit_choices(inst, plan)
    else:
        raise click.UsageError("expected a PLAN file or both --pp and --dp")
    evaluation = evaluate(inst, plan)
    if evaluation.malformed_fields:
        if plan_path is None:
            way_out = ("; an instance made with `instance new ... --launcher none` has no "
                       "launcher rules" if evaluation.malformed_fields[0] == "launcher" else "")
            raise click.UsageError(f"the plan from the options does not fit the instance: "
                                   f"{evaluation.violations[0]}{way_out}")
        raise PlanFormatError(f"expected a plan that fits the instance: "
                              f"{evaluation.violations[0]}", file=plan_path,
                              field=evaluation.malformed_fields[0])
    peak = inst.cluster.peak_flops_per_s
    if as_json:
        data = evaluation.as_dict()
        data["tflops_per_gpu"] = (None if evaluation.mfu is None or peak is None
                                  else evaluation.mfu * peak / 1e12)
        if evaluation.sdp is None:
            for stage, report in zip(data["stages"], evaluation.stages, strict=True):
                stage["sync_split"] = _sync_split(inst, evaluation, report).as_dict()
        click.echo(json.dumps(data, indent=1))
    else:
        click.echo(_evaluation_table(inst, evaluation, peak))
    sys.exit(ExitCode.OK if evaluation.feasible else ExitCode.NO_PLAN)


def _split_stages(inst: Instance, pp: int, vp: int, recompute: str,
                  split: str) -> tuple[Stage, ...]:
    """The pp x vp chunks of a plan from the command line: Megatron-LM's split (l / (p v)
    blocks per chunk, extras to the middle chunks; the embedding with the first chunk and
    the head with the last) or every layer of the chain alike; recompute modes by stage."""
    from nest_cp.harness.runs import megatron_chunks

    layers = inst.workload.layers
    framed = len(layers) >= 3 and layers[0].name == "embedding" and layers[-1].name == "head"
    if split == "megatron" and not framed:
        raise click.BadParameter("expected a chain embedding, blocks..., head for the "
                                 "Megatron split (use --split even)", param_hint="--split")
    megatron = split == "megatron" or (split == "auto" and framed)
    count = len(layers) - 2 if megatron else len(layers)
    if pp * vp > count:
        kind = "transformer blocks" if megatron else "layers"
        raise click.BadParameter(f"expected --pp x --vp <= {count} {kind}, got {pp} x {vp}",
                                 param_hint="--pp")
    even = uniform_stages(len(layers), pp, recompute, vp)
    if not megatron:
        return even
    chunks = megatron_chunks(count, pp, vp, RecomputeMode.NONE)
    return tuple(replace(chunk, recompute=mode.recompute)
                 for chunk, mode in zip(chunks, even, strict=True))


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


def _evaluation_table(inst: Instance, evaluation: Evaluation,
                      peak_flops_per_s: float | None = None) -> str:
    if evaluation.sdp is not None:
        return _sdp_evaluation_table(evaluation)
    plan = evaluation.plan
    context = f" cp={plan.config.cp}" if plan.config.cp > 1 else ""
    head = (f"plan: tp={plan.config.tp} ep={plan.config.ep}{context} "
            f"microbatch={plan.microbatch} "
            f"zero={plan.zero} stages={plan.num_stages} v={plan.virtual_stages} "
            f"dp={plan.num_replicas} ({plan.num_devices_used} devices)")
    if evaluation.objective_ticks is None:
        return "\n".join([head, "not evaluable:"] + [f"  - {v}" for v in evaluation.violations])
    tick_ms = inst.training.tick_s * 1e3
    tau = "tau_chunk" if plan.virtual_stages > 1 else "tau_max"
    rows = [head, plan_report(inst, evaluation), *_sync_lines(inst, evaluation),
            f"microbatches per replica m = {evaluation.num_microbatches}, "
            f"{tau} = {evaluation.tau_max_ticks} ticks ({evaluation.tau_max_ticks * tick_ms:.3f}"
            f" ms), T_sync = {evaluation.exposed_sync_ticks} ticks exposed of "
            f"{evaluation.sync_ticks} ({evaluation.exposed_sync_ticks * tick_ms:.3f} ms of "
            f"{evaluation.sync_ticks * tick_ms:.3f} ms)",
            f"iteration {evaluation.objective_ticks} ticks = {evaluation.iteration_time_s:.6f} s, "
            f"{rate(evaluation.throughput_samples_per_s, 2)} samples/s, "
            f"{rate(evaluation.throughput_tokens_per_s, 0)} tokens/s, "
            f"{tflops(evaluation.mfu, peak_flops_per_s)} TF/s per GPU (model FLOPs), "
            f"MFU {percent(evaluation.mfu)}, HFU {percent(evaluation.hfu)}",
            "feasible" if evaluation.feasible else "INFEASIBLE:"]
    rows += [f"  - {v}" for v in evaluation.violations]
    return "\n".join(rows)


@dataclass(frozen=True, slots=True)
class _SyncSplit:
    """One stage's data-parallel sync split into what the iteration is charged and what
    overlapping hides (docs/cost-model.md §3 and §5 c-d).

    The gradient phase (an all-reduce for ZeRO-0, else a reduce-scatter) can hide behind the
    backward ticks R of one microbatch (``overlap_grad_reduce``); ZeRO 1 and 2 end with an
    all-gather of the updated weights, which can hide behind the forward ticks F of the next
    iteration's first microbatch (``overlap_param_gather``).
    """

    phase: str
    reduce_ticks: int
    reduce_charged_ticks: int
    backward_ticks: int
    gather_ticks: int
    gather_charged_ticks: int
    forward_ticks: int

    @property
    def reduce_hidden_ticks(self) -> int:
        return self.reduce_ticks - self.reduce_charged_ticks

    @property
    def gather_hidden_ticks(self) -> int:
        return self.gather_ticks - self.gather_charged_ticks

    def as_dict(self) -> dict:
        return {"phase": self.phase, "reduce_ticks": self.reduce_ticks,
                "reduce_charged_ticks": self.reduce_charged_ticks,
                "reduce_hidden_ticks": self.reduce_hidden_ticks,
                "backward_ticks": self.backward_ticks, "gather_ticks": self.gather_ticks,
                "gather_charged_ticks": self.gather_charged_ticks,
                "gather_hidden_ticks": self.gather_hidden_ticks,
                "forward_ticks": self.forward_ticks}


def _sync_split(inst: Instance, evaluation: Evaluation, stage: StageReport) -> _SyncSplit:
    """The stage's sync split by the evaluator's own exposure rule, applied to each phase
    alone (the two charged parts add up to the stage's exposed sync)."""
    training = inst.training
    reduce, gather = stage.reduce_ticks, stage.gather_ticks
    return _SyncSplit(
        phase=terms.sync_collective(evaluation.plan.zero).value.replace("_", "-"),
        reduce_ticks=reduce,
        reduce_charged_ticks=terms.exposed_sync_ticks(reduce, stage.backward_ticks,
                                                      training.overlap_grad_reduce),
        backward_ticks=stage.backward_ticks, gather_ticks=gather,
        gather_charged_ticks=terms.exposed_sync_ticks(0, 0, False, gather, stage.forward_ticks,
                                                      training.overlap_param_gather),
        forward_ticks=stage.forward_ticks)


def _sync_lines(inst: Instance, evaluation: Evaluation) -> list[str]:
    """Per stage, the data-parallel sync charged and hidden (ms), by phase: the gradient
    phase behind the backward R, the ZeRO 1/2 weight gather behind the forward F."""
    if not any(stage.sync_ticks for stage in evaluation.stages):
        return []
    training, tick_s = inst.training, inst.training.tick_s

    def ms(ticks: int) -> str:
        return f"{ticks * tick_s * 1e3:.3f}"

    rows = ["data-parallel sync per stage (ms; charged = in T_sync, hidden = overlapped; "
            "docs/cost-model.md §5 c-d): the gradient phase",
            f"  hides behind the backward R with overlap_grad_reduce "
            f"({'on' if training.overlap_grad_reduce else 'off'}), the ZeRO 1/2 weight gather "
            f"behind the forward F with overlap_param_gather "
            f"({'on' if training.overlap_param_gather else 'off'})",
            f"  {'stage':>5} {'gradient phase':>14} {'ms':>10} {'charged':>10} {'hidden':>10} "
            f"{'behind R':>10} {'weight gather':>13} {'charged':>10} {'hidden':>10} "
            f"{'behind F':>10}"]
    for stage in evaluation.stages:
        split = _sync_split(inst, evaluation, stage)
        gather = (f"{ms(split.gather_ticks):>13} {ms(split.gather_charged_ticks):>10} "
                  f"{ms(split.gather_hidden_ticks):>10} {ms(split.forward_ticks):>10}"
                  if split.gather_ticks else f"{'-':>13} {'':>10} {'':>10} {'':>10}")
        rows.append(f"  {stage.index:>5} {split.phase:>14} {ms(split.reduce_ticks):>10} "
                    f"{ms(split.reduce_charged_ticks):>10} {ms(split.reduce_hidden_ticks):>10} "
                    f"{ms(split.backward_ticks):>10} {gather}".rstrip())
    return rows


def _sdp_evaluation_table(evaluation: Evaluation) -> str:
    """An SDP plan (docs/cost-model.md §6): one row per worker, then T, T_eff and the
    memory saved."""
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
