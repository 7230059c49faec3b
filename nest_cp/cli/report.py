"""Plans a person can read: where every rank sits, which devices idle, stage times and memory.

Layer: above the evaluator (it reads an :class:`Evaluation`), below the CLI;
``solve``, ``evaluate`` and ``show`` print :func:`plan_report`.

The placement map has one line per *group* of devices: the domains of the
finest network tier that needs at most ``max_lines`` lines (nodes, else
tier-1 domains, ...), or on a graph network the clusters of the finest
bandwidth level with at most that many (devices joined by links at least that
wide; the canonical device order keeps each cluster contiguous).  A line lists
the ranks on its devices compactly: ``s0-3 r1`` is replica 1's stages 0 to 3
with all their intra-stage ranks, ``s5 r2 j0-3`` only intra-stage ranks 0 to 3
(j = tensor index + tp·expert index) of stage 5 of replica 2.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from nest_cp.cost.evaluate import Evaluation
from nest_cp.model.instance import HierarchicalNetwork, Instance
from nest_cp.model.network import NetworkModel

DEFAULT_MAX_LINES = 32
MAX_LINE_CHARS = 110
GIB = 2**30


@dataclass(frozen=True, slots=True)
class DeviceGroup:
    """A set of devices shown as one line (a tier domain or a graph cluster)."""

    label: str
    devices: tuple[int, ...]


def device_groups(instance: Instance, network: NetworkModel | None = None,
                  max_lines: int = DEFAULT_MAX_LINES) -> tuple[DeviceGroup, ...]:
    """The groups of the placement map (module doc)."""
    network = network or NetworkModel(instance.cluster)
    count = instance.cluster.num_devices
    if isinstance(instance.cluster.network, HierarchicalNetwork):
        tiers = instance.cluster.network.tiers
        sizes = instance.cluster.network.domain_sizes()
        tier = next((k for k, size in enumerate(sizes) if math.ceil(count / size) <= max_lines),
                    len(sizes) - 1)
        size = sizes[tier]
        return tuple(DeviceGroup(f"{tiers[tier].name} {index}",
                                 tuple(range(index * size, min(count, (index + 1) * size))))
                     for index in range(math.ceil(count / size)))
    return _graph_clusters(network, count, max_lines)


def _graph_clusters(network: NetworkModel, count: int, max_lines: int) -> tuple[DeviceGroup, ...]:
    order = network.canonical_order()
    if count == 1:
        return (DeviceGroup("cluster 0", order),)
    widths = sorted({network.pair_path(a, b).bandwidth_Bps
                     for a in range(count) for b in range(a + 1, count)}, reverse=True)
    for width in widths:
        clusters: list[list[int]] = []
        for device in order:  # clusters are contiguous in the canonical order
            if clusters and any(network.pair_path(device, other).bandwidth_Bps >= width
                                for other in clusters[-1]):
                clusters[-1].append(device)
            else:
                clusters.append([device])
        if len(clusters) <= max_lines:
            label = f"{_rate(width)} cluster"
            return tuple(DeviceGroup(f"{label} {index}", tuple(devices))
                         for index, devices in enumerate(clusters))
    return (DeviceGroup("all", order),)


def _rate(bandwidth: Fraction) -> str:
    return f"{float(bandwidth) / 1e9:g} GB/s"


def ranges(values) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (sorted); a run ends where the next value is not one more
    (found on whole arrays: a million devices in milliseconds)."""
    ordered = np.sort(np.fromiter(values, dtype=np.int64))
    if ordered.size == 0:
        return ""
    ends = np.flatnonzero(np.diff(ordered) != 1)
    firsts = ordered[np.concatenate(([0], ends + 1))].tolist()
    lasts = ordered[np.concatenate((ends, [ordered.size - 1]))].tolist()
    return ",".join(str(first) if first == last else f"{first}-{last}"
                    for first, last in zip(firsts, lasts, strict=True))


def placement_lines(instance: Instance, evaluation: Evaluation,
                    network: NetworkModel | None = None,
                    max_lines: int = DEFAULT_MAX_LINES) -> list[str]:
    """One line per device group: the ranks it runs (module doc) and its idle devices."""
    plan = evaluation.plan
    where: dict[int, tuple[int, int, int]] = {}
    for stage, replicas in enumerate(plan.placement):
        for replica, ranks in enumerate(replicas):
            for rank, device in enumerate(ranks):
                where[device] = (stage, replica, rank)
    groups = device_groups(instance, network, max_lines)
    width = max(len(group.label) for group in groups)
    spans = [_span(group.devices) for group in groups]
    span = max(len(text) for text in spans)
    lines = []
    for group, devices in zip(groups, spans, strict=True):
        text = _describe(group.devices, where, plan.devices_per_replica)
        line = f"  {group.label:<{width}}  dev {devices:<{span}}  {text}"
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS - 3] + "..."
        lines.append(line)
    return lines


def _span(devices: tuple[int, ...]) -> str:
    return ranges(devices)


def _describe(devices, where: dict, per_replica: int) -> str:
    """'s0-3 r1 | s5 r2 j0-3 | idle 2' for the ranks on ``devices``."""
    held: dict[tuple[int, int], list[int]] = defaultdict(list)
    idle = 0
    for device in devices:
        if device in where:
            stage, replica, rank = where[device]
            held[(stage, replica)].append(rank)
        else:
            idle += 1
    full: dict[int, list[int]] = defaultdict(list)  # replica -> stages held entirely
    tokens = []
    for (stage, replica), ranks in sorted(held.items()):
        if len(ranks) == per_replica:
            full[replica].append(stage)
        else:
            tokens.append((stage, replica, f"s{stage} r{replica} j{ranges(ranks)}"))
    by_stages: dict[tuple[int, ...], list[int]] = defaultdict(list)  # stage set -> replicas
    for replica, stages in full.items():
        by_stages[tuple(stages)].append(replica)
    for stages, replicas in by_stages.items():
        tokens.append((stages[0], replicas[0], f"s{ranges(stages)} r{ranges(replicas)}"))
    text = " | ".join(token for *_, token in sorted(tokens))
    if idle:
        text = f"{text} | idle {idle}" if text else f"idle {idle}"
    return text


def usage_line(instance: Instance, evaluation: Evaluation) -> str:
    """'devices: 1000 of 1024 used; 24 idle (devices 1000-1023)'."""
    available = instance.cluster.num_devices
    used = {device for replicas in evaluation.plan.placement for ranks in replicas
            for device in ranks}
    idle = sorted(set(range(available)) - used)
    text = f"devices: {len(used)} of {available} used"
    if idle:
        shown = ranges(idle)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        text += f"; {len(idle)} idle (devices {shown})"
    return text


def _ms(ticks: int, tick_s: float) -> str:
    return f"{ticks * tick_s * 1e3:.3f}"


def stage_lines(instance: Instance, evaluation: Evaluation) -> list[str]:
    """Per stage: its chunks' layers, recompute mode, microbatches in flight, time per
    microbatch (ms, by term, the slowest chunk's), sync and exposed sync (ms), memory (GiB)."""
    tick_s = instance.training.tick_s
    width = max([6] + [len(_layers(s)) for s in evaluation.stages])
    rows = [f"  {'stage':>5} {'layers':>{width}} {'recompute':>9} {'k':>3} {'time ms':>10} "
            f"{'compute':>9} {'coll':>8} {'p2p':>8} {'zero3':>8} {'sync ms':>9} "
            f"{'exposed':>9} {'memory GiB':>10} {'of GiB':>7} {'fits':>4}"]
    for s in evaluation.stages:
        rows.append(
            f"  {s.index:>5} {_layers(s):>{width}} {s.recompute.value:>9} {s.in_flight:>3} "
            f"{_ms(s.time_ticks, tick_s):>10} "
            f"{_ms(s.compute_ticks + s.recompute_ticks, tick_s):>9} "
            f"{_ms(s.collective_ticks, tick_s):>8} "
            f"{_ms(s.recv_activation_ticks + s.recv_gradient_ticks, tick_s):>8} "
            f"{_ms(s.zero_gather_ticks, tick_s):>8} {_ms(s.sync_ticks, tick_s):>9} "
            f"{_ms(s.exposed_sync_ticks, tick_s):>9} "
            f"{s.memory_bytes / GIB:>10.2f} {s.memory_limit_bytes / GIB:>7.2f} "
            f"{'yes' if s.fits else 'NO':>4}")
    context = [(s.index, s.context_ticks) for s in evaluation.stages if s.context_ticks]
    if context:  # in the time column, not in coll (the rerun forward's part is in compute)
        rows.append("  context-parallel communication exposed (docs/context-parallelism.md; "
                    "not in coll): " + ", ".join(f"stage {index} {_ms(ticks, tick_s)} ms"
                                                 for index, ticks in context))
    hidden = [(s.index, s.slowest_chunk.tp_hidden_ticks) for s in evaluation.stages
              if s.slowest_chunk.tp_hidden_ticks]
    if hidden:  # coll and compute above charge only the exposed part (cost model §5 e)
        rows.append("  TP collectives hidden behind the GEMMs (tp_comm_overlap, "
                    "docs/cost-model.md §5 e; not in coll): "
                    + ", ".join(f"stage {index} {_ms(ticks, tick_s)} ms"
                                for index, ticks in hidden))
    return rows


def _layers(stage) -> str:
    """A stage's layers: its chunks' ranges ('0-0,2-2' with two virtual stages)."""
    return ",".join(f"{chunk.first_layer}-{chunk.last_layer}" for chunk in stage.chunks)


def plan_report(instance: Instance, evaluation: Evaluation,
                max_lines: int = DEFAULT_MAX_LINES) -> str:
    """Devices used, the placement map and the stage table of an evaluated plan."""
    plan = evaluation.plan
    groups = device_groups(instance, max_lines=max_lines)
    lines = [usage_line(instance, evaluation),
             f"placement ({len(groups)} lines; s = stage, r = replica, j = intra-stage rank "
             f"(a stage replica has {plan.devices_per_replica}), shown only where a stage "
             f"replica is split over lines):"]
    lines += placement_lines(instance, evaluation, max_lines=max_lines)
    lines.append("stages (time per microbatch and sync in ms, memory per device in GiB; "
                 "k = microbatches in flight):")
    lines += stage_lines(instance, evaluation)
    return "\n".join(lines)


RECOMPUTE_MARKS = {"none": "", "selective": "+", "full": "*"}


def summary_lines(instance: Instance, evaluation: Evaluation) -> list[str]:
    """The plan line (degrees and split, as ``solve`` prints it) and the iteration time."""
    plan = evaluation.plan
    split = " | ".join(f"{s.first_layer}-{s.last_layer}{RECOMPUTE_MARKS[s.recompute.value]}"
                       for s in plan.stages)
    lines = [f"plan       tp={plan.config.tp} ep={plan.config.ep} microbatch={plan.microbatch} "
             f"zero={plan.zero} stages={plan.num_stages} v={plan.virtual_stages} "
             f"dp={plan.num_replicas}  [{split}] (* full, + selective recompute)"]
    if evaluation.objective_ticks is not None:
        seconds = evaluation.objective_ticks * instance.training.tick_s
        rate = evaluation.throughput_samples_per_s
        lines.append(f"iteration  {evaluation.objective_ticks} ticks ({seconds:.6f} s/iteration"
                     + (f", {rate:.2f} samples/s)" if rate is not None else ")")
                     + ("" if evaluation.feasible else "; the plan does not fit (below)"))
    return lines

