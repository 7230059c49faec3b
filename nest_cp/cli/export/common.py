"""What every exporter returns, and the checks every launcher shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from nest_cp.cli.export.ranks import RankMap, host_name
from nest_cp.cli.export.view import RECOMPUTE_STRENGTH, LayerKind, PlanView
from nest_cp.model.instance import RecomputeMode


class ExportFormat(str, Enum):
    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"
    DEEPSPEED = "deepspeed"


@dataclass(frozen=True, slots=True)
class ExportResult:
    """One exported plan: the artifact's text, what it could not express, the rank map.

    ``args`` holds Megatron-LM's argument list, ``config`` the TOML/JSON document
    of torchtitan/DeepSpeed as plain data; ``warnings`` every choice of the plan
    the target cannot express exactly (printed on stderr, listed in ``--json``).
    """

    format: ExportFormat
    text: str
    warnings: tuple[str, ...]
    rank_map: RankMap
    args: tuple[str, ...] = ()
    config: dict = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)  # set (value) or unset (None)
    files: dict[str, str] = field(default_factory=dict)  # further artifacts: role -> text

    def as_dict(self) -> dict:
        return {"format": self.format.value, "warnings": list(self.warnings),
                "args": list(self.args), "config": self.config, "env": self.env,
                "files": self.files,
                "rank_order": self.rank_map.order.name,
                "gpus_per_node": self.rank_map.gpus_per_node,
                "launch_nodes": self.rank_map.nodes_as_dicts(),
                "rank_map": self.rank_map.as_dicts(), "text": self.text}


def common_warnings(view: PlanView) -> list[str]:
    """What no launcher can take from the plan as it is: memory, batch rounding, layer kinds."""
    found = []
    if not view.fits_memory:
        found.append(f"the evaluator finds this plan over memory ({view.memory_note}); it is "
                     f"exported as it is")
    if view.samples_per_iteration != view.global_batch:
        found.append(
            f"global batch {view.global_batch} is not a multiple of micro-batch x "
            f"data-parallel ranks = {view.microbatch} x {view.data_parallel}: launchers "
            f"need one, so the export uses {view.samples_per_iteration} = "
            f"{view.num_microbatches} microbatches x {view.microbatch} x {view.data_parallel}, "
            f"the samples the plan's iteration time was charged for")
    if view.sequence_parallel_note:
        found.append(view.sequence_parallel_note)
    if view.attention is None:
        found.append("the workload does not record which attention kernel its profiles assume "
                     "(flash or materialized): the launcher uses its default, which may not be "
                     "what the plan was priced with")
    kinds = set(view.layer_kinds)
    if LayerKind.EMBEDDING not in kinds:
        found.append(f"the workload's first layer ({view.layer_names[0]!r}) is not an "
                     f"embedding: the launcher still builds one on the first stage, which the "
                     f"plan did not price")
    if LayerKind.HEAD not in kinds:
        found.append(f"the workload's last layer ({view.layer_names[-1]!r}) is not an output "
                     f"head: the launcher still builds one (and the loss) on the last stage, "
                     f"which the plan did not price")
    return found


def one_recompute_mode(view: PlanView, target: str) -> tuple[RecomputeMode, list[str]]:
    """The single recompute mode a launcher applies to every stage, and a warning if mixed.

    Launchers take one setting for all stages; with a per-stage mix the export
    uses the strongest mode present (memory stays within the plan's, time grows).
    """
    modes = view.stage_recompute
    strongest = max(modes, key=RECOMPUTE_STRENGTH.__getitem__)
    if len(set(modes)) == 1:
        return strongest, []
    groups = "; ".join(
        f"stages {_ranges([s for s, mode in enumerate(modes) if mode is m])} {m.value}"
        for m in sorted(set(modes), key=RECOMPUTE_STRENGTH.__getitem__))
    return strongest, [f"per-stage recomputation ({groups}): {target} applies one setting to "
                       f"every stage; exported {strongest.value} for all stages (more "
                       f"recompute time than the plan, no more memory)"]


def placement_warning(rank_map: RankMap, orders: str) -> list[str]:
    """The warning for a placement no one-agent-per-host launch realises (ranks module)."""
    if rank_map.one_agent_per_host:
        return []
    hosts = rank_map.split_hosts
    shown = ", ".join(host_name(h) for h in hosts[:8]) + (" ..." if len(hosts) > 8 else "")
    return [f"placement not expressible by {orders} with one launcher per host: "
            f"{len(hosts)} hosts ({shown}) run non-consecutive global ranks; the launch table "
            f"starts {len(rank_map.nodes)} torchrun agents, several on those hosts, each with "
            f"its own node rank and CUDA_VISIBLE_DEVICES"]


def _ranges(values: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    parts, start = [], None
    for index, value in enumerate(values):
        if start is None:
            start = value
        if index + 1 == len(values) or values[index + 1] != value + 1:
            parts.append(str(start) if start == value else f"{start}-{value}")
            start = None
    return ",".join(parts)


def ranges_text(values: list[int]) -> str:
    return _ranges(sorted(values))


def split_text(view: PlanView) -> str:
    """The chunks as 'first-last' layer ranges: '0-2 | 3-5 | ...'."""
    return " | ".join(f"{c.first_layer}-{c.last_layer}" for c in view.chunks)


def plan_summary(view: PlanView) -> str:
    """One line naming the plan's degrees and device use, for the artifacts' headers."""
    idle = view.num_devices - view.world_size
    context = f"cp={view.cp} ({view.cp_comm}) " if view.cp > 1 else ""
    return (f"tp={view.tp} {context}ep={view.ep} pp={view.num_stages} vpp={view.virtual_stages} "
            f"dp={view.replicas} microbatch={view.microbatch} zero={view.zero}; "
            f"{view.world_size} of {view.num_devices} devices"
            + (f" ({idle} idle)" if idle else ""))
