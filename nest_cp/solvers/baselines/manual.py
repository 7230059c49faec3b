"""Megatron-LM rules of thumb (``manual``) and user-given degrees (``fixed``).

``manual`` picks a plan the way practitioners configure Megatron-LM
(Narayanan et al., SC'21, "Efficient large-scale language model training on
GPU clusters using Megatron-LM", §3.3 takeaways: tensor parallelism up to the
devices of one node, pipeline parallelism across nodes, data parallelism for
the rest):

1. Microbatch b: the smallest allowed size the workload profiles; ZeRO stage:
   the smallest allowed one (Megatron's default, no sharding, when 0 is
   allowed).
2. Expert width e: the largest profiled width that fits in one node (the
   innermost tier's size, or on a graph the devices sharing device 0's
   widest links), else the smallest profiled — expert parallelism is
   configured, not searched (1 for dense models).  Tensor width t, among the
   widths profiled with that e: if the model fits on replicas of the
   smallest one in a single stage (pure data parallelism), that width;
   otherwise the model needs model parallelism and t is the largest width
   whose replica t·e still fits in one node — Narayanan et al.'s "tensor
   parallelism up to the node size, then pipeline parallelism".  If nothing
   fits with that width, the other widths are tried in ascending order.
2b. Context width c (Megatron-LM's ``--context-parallel-size``), where the instance
   allows widths c > 1 profiled with that (t, e): the smallest allowed width whose
   plan (rules 3 and 4) recomputes nowhere; if every width's plan recomputes, the
   smallest whose plan fits.  Context parallelism splits the sequence, so it divides
   a stage's activations by c at the price of the ring's (or the all-to-alls')
   traffic; practitioners turn it on for long sequences whose activations do not
   fit, before recomputing (Llama 3 trained its 8K stage with c = 1 and its 128K
   stage with c = 16, Dubey et al. 2024, §3.3.2).  This is our reading of practice,
   not a rule Megatron enforces; the CP ranks sit in Megatron's order
   (t, c, e, replica, stage), inside t·c·e-rank replicas that may leave a node.
3. Pipeline depth S: the smallest depth at which every stage fits memory
   (without interleaving), each stage recomputing by Megatron practice: no
   recomputation where the stage fits, else selective recomputation if the
   instance allows it and it fits, else full (``_common.fit_recompute``;
   Korthikanti et al., MLSys'23).
4. Data parallelism d: the rest, d = floor(N / (t·c·e·S)), capped at
   B / (b·e) so no replica is idle.
5. Interleaving (DESIGN §3.2 b), where the instance allows v > 1 and the model
   is deep enough: the largest allowed v with S >= 2, m a multiple of S
   (Megatron-LM's assertion for the interleaved schedule; its README,
   ``--num-layers-per-virtual-pipeline-stage``) and at least
   ``MIN_LAYERS_PER_CHUNK`` = 2 layers per chunk, whose plan still fits
   (interleaving keeps more activations in flight; recomputation is chosen
   again as in rule 3).  Narayanan et al. §2.2.2: the interleaved schedule
   divides the pipeline bubble by v for v times the pipeline point-to-point
   traffic; production Megatron configurations interleave down to about two
   transformer layers per virtual stage (NVIDIA's MLPerf Training v5.1
   Llama 3.1 405B: 126 layers, pipeline 8, virtual pipeline 8).  This is our
   reading of common practice, not a rule Megatron enforces.
6. Layers split as evenly as possible into S·v chunks (the later ones take the
   surplus); ranks in Megatron's default order (t, c, e, replica, stage) over the
   network's canonical device order (``plan.contiguous_placement``: for c = 1
   ``plan.MEGATRON_LAYOUT``).  Gradient
   reduction overlaps the backward exactly when the instance says so (a fact of
   the training setup, not a choice).

Against NEST's shipped manual configurations at 128 devices (DESIGN §6;
measured in ``reports/paper/published_manual.md``): the rules reproduce
none of them exactly.  BERT (8, 16, 1): BERT fits one device, so the rules
give pure data parallelism (1, 128, 1); NEST added an 8-deep pipeline by
hand.  Llama2 (8, 16, 1): NEST profiles Llama2 at t = 1 only; with our
profiles (t up to 8) the 7B model does not fit one device, so rule 2 fills
the node, (1, 16, 8).  GPT3 (32, 1, 4) uses NEST's smallest profiled width
where rule 2 fills the node (t = 8).  Llama3 (80, 1, 1) and Mixtral
(32, 1, 1, e = 4) put one layer per stage, deeper than memory requires under
rule 3.  Use ``fixed`` with ``extra["degrees"] = (p, d, t[, e[, c]])`` (``--degrees``),
optionally ``extra["virtual_stages"]`` (``--vp``) and ``extra["recompute"]``
(``--recompute``), to run a published configuration exactly.

Under a launcher (``training.launcher``) the rules pick among the plans that launcher
starts, as a practitioner configuring it would: the ZeRO stage is the smallest allowed
one the launcher accepts for the shape, d the largest the launcher accepts up to rule 4's
(its batch arithmetic wants B a multiple of b·e·d), a shape it refuses (heads not
divisible by t, AutoTP or ZeRO-2/3 beside a DeepSpeed pipeline, ...) is skipped like one
that does not fit, and every stage recomputes in one mode (``_common``).  ``fixed``
refuses degrees the launcher refuses (a bad option naming the rule).
"""

from __future__ import annotations

import logging
import time

from nest_cp.cost import terms as cost
from nest_cp.cost.evaluate import Evaluator
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.instance import HierarchicalNetwork, Instance, IntraConfig, RecomputeMode
from nest_cp.model.launchers.search import SearchShape, one_recompute_mode, shape_problems
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, contiguous_placement, uniform_stages
from nest_cp.model.result import SolveOptions, SolveResult, Status
from nest_cp.solvers.baselines._common import (
    admitted_dp,
    empty_result,
    feasible_result,
    megatron_plan,
    smallest_microbatch,
)

logger = logging.getLogger(__name__)

MIN_LAYERS_PER_CHUNK = 2  # rule 5: "deep enough" to interleave


def solve_manual(instance: Instance, options: SolveOptions) -> SolveResult:
    """Megatron rules of thumb (module docstring); UNKNOWN if no rule-made plan fits.

    The rules failing proves nothing about other plans, so it is never INFEASIBLE.
    """
    started = time.perf_counter()
    referee = Evaluator(instance)
    for config in _tensor_candidates(referee):
        plan = _context_plan(referee, config)
        if plan is not None:
            plan = _interleaved(referee, plan)
        if plan is not None:
            logger.debug("manual: t=%d c=%d e=%d S=%d d=%d v=%d", config.tp, plan.config.cp,
                         config.ep, plan.num_stages, plan.num_replicas, plan.virtual_stages)
            return feasible_result("manual", referee, plan, started,
                                   stats={"degrees": _degrees(plan)})
    launcher = instance.training.launcher.value
    refused = "" if launcher == "none" else f" or is refused by the launcher ({launcher})"
    return empty_result("manual", Status.UNKNOWN, started,
                        "no Megatron rule-of-thumb plan fits: every profiled tensor width and "
                        f"pipeline depth exceeds usable HBM even with recomputation{refused}")


def solve_fixed(instance: Instance, options: SolveOptions) -> SolveResult:
    """The user's degrees extra["degrees"] = (p, d, t[, e[, c]]): uniform split, Megatron
    layout (c the context width, Megatron-LM's ``--context-parallel-size``; default 1).

    Optional extra["microbatch"], extra["zero"] (defaults: the smallest allowed),
    extra["virtual_stages"] (default 1) and extra["recompute"] (a mode for every stage,
    or "all-but-last"; default: Megatron's rule, ``_common.fit_recompute``).  Degrees the
    instance cannot take (no profile for the width, more chunks than layers, more devices
    than the cluster has, a v or mode it does not allow) are bad options; degrees whose
    plan exceeds memory are an answer (UNKNOWN: no plan).
    """
    started = time.perf_counter()
    num_stages, dp, config = _fixed_degrees(instance, options.extra)
    microbatch = options.extra.get("microbatch", smallest_microbatch(instance, config))
    zero = options.extra.get("zero", min(instance.training.zero_stages))
    if microbatch is None or (config, microbatch) not in instance.choices:
        which = "any allowed microbatch" if microbatch is None else f"microbatch={microbatch}"
        profiled = ", ".join(sorted({_widths(c) for c, _ in instance.choices}))
        raise BackendOptionError(f"expected an allowed, profiled width ({profiled}), got no "
                                 f"profile for {_widths(config)} with {which}",
                                 option="degrees")
    virtual = _fixed_virtual_stages(instance, options.extra, config, microbatch, num_stages, dp)
    recompute = _fixed_recompute(instance, options.extra)
    _check_launcher(instance, SearchShape(config.tp, config.ep, microbatch, dp, num_stages,
                                          virtual, zero, config.cp), recompute)
    referee = Evaluator(instance)
    degrees = f"(p, d, t, e) = ({num_stages}, {dp}, {config.tp}, {config.ep})" + (
        f" with c = {config.cp}" if config.cp > 1 else "") + (
        f" with v = {virtual}" if virtual > 1 else "")
    if recompute is None:
        plan = megatron_plan(referee, config, microbatch, zero, num_stages, dp, virtual)
        failure = f"{degrees} exceeds usable HBM even with recomputation"
    else:
        plan = Plan(config, microbatch, zero, dp, uniform_stages(
            instance.workload.num_layers, num_stages, recompute, virtual), virtual_stages=virtual)
        plan = plan.with_placement(contiguous_placement(  # Megatron's order, c included
            config, num_stages, dp, referee.network.canonical_order()))
        limit = instance.cluster.usable_hbm_bytes
        if any(referee.stage_memory_bytes(plan, stage) > limit for stage in range(num_stages)):
            plan = None
        failure = f"{degrees} with recompute {recompute} exceeds usable HBM"
    if plan is None:
        return empty_result("fixed", Status.UNKNOWN, started, failure)
    return feasible_result("fixed", referee, plan, started, stats={"degrees": _degrees(plan)})


def _check_launcher(instance: Instance, shape: SearchShape, recompute: str | None) -> None:
    """BackendOptionError naming the first rule of the instance's launcher the fixed plan
    breaks: a shape it refuses, or two recompute modes where it applies one to all."""
    launcher = instance.training.launcher
    problems = shape_problems(launcher, instance.search_facts, shape)
    if problems:
        raise BackendOptionError(f"expected degrees training.launcher accepts, got "
                                 f"{problems[0]}", option="degrees")
    if recompute == "all-but-last" and one_recompute_mode(launcher) and shape.num_stages > 1:
        raise BackendOptionError(f"expected one recompute mode for every stage under "
                                 f"training.launcher {launcher.value}, got all-but-last",
                                 option="recompute")


def _fixed_degrees(instance: Instance, extra: dict) -> tuple[int, int, IntraConfig]:
    """(S, d, config) of extra["degrees"] = (p, d, t[, e[, c]]); BackendOptionError if
    unusable."""
    degrees = tuple(extra.get("degrees", ()))
    if len(degrees) not in (3, 4, 5) or not all(isinstance(x, int) and x >= 1 for x in degrees):
        raise BackendOptionError(f"expected degrees p,d,t[,e[,c]] of integers >= 1, got "
                                 f"{extra.get('degrees')!r}", option="degrees")
    num_stages, dp, tp = degrees[:3]
    config = IntraConfig(tp=tp, ep=degrees[3] if len(degrees) >= 4 else 1,
                         cp=degrees[4] if len(degrees) == 5 else 1)
    if num_stages > instance.workload.num_layers:
        raise BackendOptionError(f"expected p <= {instance.workload.num_layers} layers, "
                                 f"got p = {num_stages}", option="degrees")
    if config.devices * num_stages * dp > instance.cluster.num_devices:
        raise BackendOptionError(
            f"expected p*d*t*e{'*c' if config.cp > 1 else ''} <= "
            f"{instance.cluster.num_devices} devices, got "
            f"{config.devices * num_stages * dp}", option="degrees")
    return num_stages, dp, config


def _widths(config: IntraConfig) -> str:
    """``t=T, e=E`` and, when c > 1, ``, c=C``: a configuration in --degrees' letters."""
    return f"t={config.tp}, e={config.ep}" + (f", c={config.cp}" if config.cp > 1 else "")


def _fixed_virtual_stages(instance: Instance, extra: dict, config: IntraConfig, microbatch: int,
                          num_stages: int, dp: int) -> int:
    """extra["virtual_stages"] (default 1), checked against the instance and DESIGN §3.2 b."""
    virtual = extra.get("virtual_stages", 1)
    allowed = instance.training.virtual_stages
    if not (isinstance(virtual, int) and virtual in allowed):
        raise BackendOptionError(f"expected virtual stages among {list(allowed)} (the "
                                 f"instance's), got {virtual!r}", option="virtual_stages")
    if virtual == 1:
        return 1
    microbatches = cost.num_microbatches(instance.training.global_batch, microbatch, config, dp)
    layers = instance.workload.num_layers
    if num_stages < 2 or microbatches % num_stages or num_stages * virtual > layers:
        raise BackendOptionError(
            f"expected p >= 2, m = {microbatches} microbatches a multiple of p and p x v <= "
            f"{layers} layers for v = {virtual}, got p = {num_stages}", option="virtual_stages")
    return virtual


def _fixed_recompute(instance: Instance, extra: dict) -> str | None:
    """extra["recompute"]: None (Megatron's rule), a mode or "all-but-last", if allowed."""
    recompute = extra.get("recompute")
    if recompute is None:
        return None
    allowed = instance.training.recompute_modes
    needed = {"all-but-last": (RecomputeMode.NONE, RecomputeMode.FULL)}.get(
        recompute, tuple(m for m in RecomputeMode if m.value == recompute))
    if not needed or any(mode not in allowed for mode in needed):
        raise BackendOptionError(
            f"expected recompute among {[m.value for m in allowed]} (the instance's) or "
            f"all-but-last where none and full are allowed, got {recompute!r}",
            option="recompute")
    return recompute


def node_size(network: NetworkModel) -> int:
    """Devices of one node: the innermost tier, or on a graph device 0's widest-link neighbours."""
    cluster = network.cluster
    if isinstance(cluster.network, HierarchicalNetwork):
        return min(cluster.network.tiers[0].size, cluster.num_devices)
    order = network.canonical_order()
    first = order[0]
    widths = [network.pair_path(first, other).bandwidth_Bps for other in order[1:]]
    if not widths:
        return 1
    return 1 + sum(1 for width in widths if width == max(widths))


def _tensor_candidates(referee: Evaluator) -> list[IntraConfig]:
    """Rule 2's configurations to try, best first."""
    instance = referee.instance
    node = node_size(referee.network)
    usable = [config for config in instance.workload.configs
              if smallest_microbatch(instance, config) is not None]
    if not usable:
        return []
    narrowest = min(config.cp for config in usable)  # rule 2b widens c afterwards
    usable = [config for config in usable if config.cp == narrowest]
    expert_widths = sorted({config.ep for config in usable})
    inside = [width for width in expert_widths if width <= node]
    expert = inside[-1] if inside else expert_widths[0]
    configs = sorted((c for c in usable if c.ep == expert), key=lambda c: c.tp)
    smallest = configs[0]
    if smallest.devices <= instance.cluster.num_devices and \
            _rest_plan(referee, smallest, 1) is not None:
        return [smallest]  # fits without model parallelism
    filling = [config for config in configs if config.devices <= node]
    order = filling[-1:]
    return order + [config for config in configs if config not in order]


def _context_plan(referee: Evaluator, config: IntraConfig) -> Plan | None:
    """Rule 2b over rules 3 and 4: the smallest allowed context width with (t, e) of
    ``config`` whose shallowest plan recomputes nowhere, else the smallest whose plan
    fits; None if none fits."""
    instance = referee.instance
    widths = sorted({choice.cp for choice, _ in instance.choices
                     if (choice.tp, choice.ep) == (config.tp, config.ep)})
    fallback = None
    for width in widths:
        plan = _shallowest_plan(referee, IntraConfig(config.tp, config.ep, width))
        if plan is None:
            continue
        if all(plan.stage_recompute(stage) is RecomputeMode.NONE
               for stage in range(plan.num_stages)):
            return plan
        fallback = fallback or plan
    return fallback


def _shallowest_plan(referee: Evaluator, config: IntraConfig) -> Plan | None:
    """Rules 3 and 4: the smallest pipeline depth that fits, data parallelism for the rest."""
    instance = referee.instance
    deepest = min(instance.workload.num_layers, instance.cluster.num_devices // config.devices)
    for num_stages in range(1, deepest + 1):
        plan = _rest_plan(referee, config, num_stages)
        if plan is not None:
            return plan
    return None


def _rest_plan(referee: Evaluator, config: IntraConfig, num_stages: int) -> Plan | None:
    """Rules 1 and 4 at depth S (v = 1): the smallest microbatch, the smallest allowed ZeRO
    stage the launcher accepts and the largest d up to the rest it accepts; None if no
    such shape is accepted or its plan does not fit."""
    instance = referee.instance
    microbatch = smallest_microbatch(instance, config)
    most = _data_parallel_rest(instance, config, microbatch, num_stages)
    for zero in sorted(instance.training.zero_stages):
        dp = admitted_dp(instance, config, microbatch, num_stages, most, zero=zero)
        if dp is not None:
            return megatron_plan(referee, config, microbatch, zero, num_stages, dp)
    return None


def _interleaved(referee: Evaluator, plan: Plan) -> Plan | None:
    """Rule 5: ``plan`` with the largest allowed v > 1 that applies and fits, else as it is
    (None when the instance does not allow v = 1 either)."""
    instance, num_stages = referee.instance, plan.num_stages
    # only an interleaved plan may be allowed (v = 1 not among the instance's v)
    plain = plan if 1 in instance.training.virtual_stages else None
    microbatches = cost.num_microbatches(instance.training.global_batch, plan.microbatch,
                                         plan.config, plan.num_replicas)
    if num_stages < 2 or microbatches % num_stages:
        return plain
    for virtual in sorted(instance.training.virtual_stages, reverse=True):
        if virtual == 1 or \
                instance.workload.num_layers < MIN_LAYERS_PER_CHUNK * num_stages * virtual:
            continue
        interleaved = megatron_plan(referee, plan.config, plan.microbatch, plan.zero,
                                    num_stages, plan.num_replicas, virtual)
        if interleaved is not None:
            return interleaved
    return plain


def _data_parallel_rest(instance: Instance, config: IntraConfig, microbatch: int,
                        num_stages: int) -> int:
    """Rule 4: d = floor(N / (t·e·S)), capped at B / (b·e) so that no replica idles."""
    useful_replicas = max(1, instance.training.global_batch // (microbatch * config.ep))
    return min(instance.cluster.num_devices // (config.devices * num_stages), useful_replicas)


def _degrees(plan: Plan) -> dict:
    modes = [plan.stage_recompute(stage).value for stage in range(plan.num_stages)]
    return {"p": plan.num_stages, "d": plan.num_replicas, "t": plan.config.tp, "e": plan.config.ep,
            "c": plan.config.cp,
            "b": plan.microbatch, "z": plan.zero, "v": plan.virtual_stages,
            "recompute": sum(mode != RecomputeMode.NONE.value for mode in modes),
            "recompute_modes": modes}
