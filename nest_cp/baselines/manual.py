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
3. Pipeline depth S: the smallest depth at which every stage fits memory,
   with activation recomputation switched on for exactly the stages that
   need it.
4. Data parallelism d: the rest, d = floor(N / (t·e·S)), capped at
   B / (b·e) so no replica is idle.
5. Layers split as evenly as possible (the later stages take the surplus);
   ranks in Megatron's default order (t, e, replica, stage) over the
   network's canonical device order (``plan.MEGATRON_LAYOUT``).

Against NEST's shipped manual configurations at 128 devices (DESIGN §6;
measured in ``reports/paper/published_manual.md``): the rules reproduce
none of them exactly.  BERT (8, 16, 1): BERT fits one device, so the rules
give pure data parallelism (1, 128, 1); NEST added an 8-deep pipeline by
hand.  Llama2 (8, 16, 1): NEST profiles Llama2 at t = 1 only; with our
profiles (t up to 8) the 7B model does not fit one device, so rule 2 fills
the node, (1, 16, 8).  GPT3 (32, 1, 4) uses NEST's smallest profiled width
where rule 2 fills the node (t = 8).  Llama3 (80, 1, 1) and Mixtral
(32, 1, 1, e = 4) put one layer per stage, deeper than memory requires under
rule 3.  Use ``fixed`` with ``extra["degrees"] = (p, d, t[, e])`` to run a
published configuration exactly.
"""

from __future__ import annotations

import logging
import time

from nest_cp.baselines._common import (
    empty_result,
    feasible_result,
    megatron_plan,
    smallest_microbatch,
)
from nest_cp.errors import BackendOptionError
from nest_cp.model import HierarchicalNetwork, Instance, IntraConfig, RecomputeMode
from nest_cp.network import NetworkModel
from nest_cp.plan import Plan
from nest_cp.result import SolveOptions, SolveResult, Status

logger = logging.getLogger(__name__)


def solve_manual(instance: Instance, options: SolveOptions) -> SolveResult:
    """Megatron rules of thumb (module docstring); UNKNOWN if no rule-made plan fits.

    The rules failing proves nothing about other plans, so it is never INFEASIBLE.
    """
    started = time.perf_counter()
    network = NetworkModel(instance.cluster)
    zero = min(instance.training.zero_stages)
    for config in _tensor_candidates(instance, network):
        plan = _shallowest_plan(instance, network, config, zero)
        if plan is not None:
            logger.debug("manual: t=%d e=%d S=%d d=%d", config.tp, config.ep, plan.num_stages,
                         plan.num_replicas)
            return feasible_result("manual", instance, plan, network, started,
                                   stats={"degrees": _degrees(plan)})
    return empty_result("manual", Status.UNKNOWN, started,
                        "no Megatron rule-of-thumb plan fits: every profiled tensor width and "
                        "pipeline depth exceeds usable HBM even with recomputation")


def solve_fixed(instance: Instance, options: SolveOptions) -> SolveResult:
    """The user's degrees extra["degrees"] = (p, d, t[, e]): uniform split, Megatron layout.

    Optional extra["microbatch"] and extra["zero"]; defaults are the smallest allowed.
    """
    started = time.perf_counter()
    degrees = tuple(options.extra.get("degrees", ()))
    if len(degrees) not in (3, 4) or not all(isinstance(x, int) and x >= 1 for x in degrees):
        raise BackendOptionError(f"expected extra['degrees'] = (p, d, t[, e]) of integers >= 1, "
                                 f"got {options.extra.get('degrees')!r}")
    num_stages, dp, tp = degrees[:3]
    if num_stages > instance.workload.num_layers:
        raise BackendOptionError(f"expected p <= {instance.workload.num_layers} layers, "
                                 f"got p = {num_stages}")
    config = IntraConfig(tp=tp, ep=degrees[3] if len(degrees) == 4 else 1)
    microbatch = options.extra.get("microbatch", smallest_microbatch(instance, config))
    zero = options.extra.get("zero", min(instance.training.zero_stages))
    if microbatch is None or (config, microbatch) not in instance.choices:
        which = "any allowed microbatch" if microbatch is None else f"microbatch={microbatch}"
        return empty_result("fixed", Status.UNKNOWN, started,
                            f"no profile for tp={config.tp}, ep={config.ep} with {which}")
    network = NetworkModel(instance.cluster)
    plan = megatron_plan(instance, network, config, microbatch, zero, num_stages, dp)
    if plan is None:
        return empty_result("fixed", Status.UNKNOWN, started,
                            f"(p, d, t, e) = ({num_stages}, {dp}, {tp}, {config.ep}) does not "
                            f"fit: too many devices or stages, or over HBM with recomputation")
    return feasible_result("fixed", instance, plan, network, started,
                           stats={"degrees": _degrees(plan)})


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


def _tensor_candidates(instance: Instance, network: NetworkModel) -> list[IntraConfig]:
    """Rule 2's configurations to try, best first."""
    node = node_size(network)
    usable = [config for config in instance.workload.configs
              if smallest_microbatch(instance, config) is not None]
    if not usable:
        return []
    expert_widths = sorted({config.ep for config in usable})
    inside = [width for width in expert_widths if width <= node]
    expert = inside[-1] if inside else expert_widths[0]
    configs = sorted((c for c in usable if c.ep == expert), key=lambda c: c.tp)
    smallest = configs[0]
    microbatch = smallest_microbatch(instance, smallest)
    if smallest.devices <= instance.cluster.num_devices and megatron_plan(
            instance, network, smallest, microbatch, min(instance.training.zero_stages), 1,
            _data_parallel_rest(instance, smallest, microbatch, 1)) is not None:
        return [smallest]  # fits without model parallelism
    filling = [config for config in configs if config.devices <= node]
    order = filling[-1:]
    return order + [config for config in configs if config not in order]


def _shallowest_plan(instance: Instance, network: NetworkModel, config: IntraConfig,
                     zero: int) -> Plan | None:
    """Rule 3 and 4: the smallest pipeline depth that fits, data parallelism for the rest."""
    microbatch = smallest_microbatch(instance, config)
    deepest = min(instance.workload.num_layers, instance.cluster.num_devices // config.devices)
    for num_stages in range(1, deepest + 1):
        dp = _data_parallel_rest(instance, config, microbatch, num_stages)
        plan = megatron_plan(instance, network, config, microbatch, zero, num_stages, dp)
        if plan is not None:
            return plan
    return None


def _data_parallel_rest(instance: Instance, config: IntraConfig, microbatch: int,
                        num_stages: int) -> int:
    """Rule 4: d = floor(N / (t·e·S)), capped at B / (b·e) so that no replica idles."""
    useful_replicas = max(1, instance.training.global_batch // (microbatch * config.ep))
    return min(instance.cluster.num_devices // (config.devices * num_stages), useful_replicas)


def _degrees(plan: Plan) -> dict:
    return {"p": plan.num_stages, "d": plan.num_replicas, "t": plan.config.tp, "e": plan.config.ep,
            "b": plan.microbatch, "z": plan.zero,
            "recompute": sum(stage.recompute is not RecomputeMode.NONE for stage in plan.stages)}
