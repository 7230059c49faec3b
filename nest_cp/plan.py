"""The plan (DESIGN §2) and the rank layouts of the structured space (DESIGN §4).

A rank is (stage s, replica r, intra-stage rank j) with j = t_index + tp * e_index
(tensor ranks innermost).  ``Plan.placement[s][r][j]`` is its device id.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import Enum

from nest_cp.errors import InstanceFormatError
from nest_cp.model import IntraConfig


@dataclass(frozen=True, slots=True)
class Stage:
    """A contiguous run of layers ``first_layer..last_layer`` (inclusive)."""

    first_layer: int
    last_layer: int
    recompute: bool = False

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.last_layer + 1)


Placement = tuple[tuple[tuple[int, ...], ...], ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """Every choice of DESIGN §2; ``placement`` None means the default Megatron layout."""

    config: IntraConfig
    microbatch: int
    zero: int
    num_replicas: int  # d, the data-parallel degree ("dp" in plan files)
    stages: tuple[Stage, ...]
    placement: Placement | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.microbatch, int) and self.microbatch >= 1):
            raise InstanceFormatError(f"expected an integer >= 1, got {self.microbatch!r}",
                                      field="microbatch")
        if self.zero not in (0, 1, 2, 3):
            raise InstanceFormatError(f"expected a ZeRO stage in 0..3, got {self.zero!r}",
                                      field="zero")
        if not (isinstance(self.num_replicas, int) and self.num_replicas >= 1):
            raise InstanceFormatError(f"expected an integer >= 1, got {self.num_replicas!r}",
                                      field="dp")
        if not self.stages:
            raise InstanceFormatError("expected at least one stage, got []", field="stages")

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def devices_per_replica(self) -> int:
        return self.config.devices

    @property
    def num_devices_used(self) -> int:
        return self.config.devices * self.num_stages * self.num_replicas

    def with_placement(self, placement: Placement) -> Plan:
        return Plan(self.config, self.microbatch, self.zero, self.num_replicas, self.stages,
                    placement)


class Dim(str, Enum):
    """The four rank dimensions a layout orders."""

    TP = "t"
    EP = "e"
    STAGE = "stage"
    REPLICA = "replica"


@dataclass(frozen=True, slots=True)
class RankLayout:
    """An order of the rank dimensions from innermost to outermost, tensor ranks first."""

    order: tuple[Dim, ...]

    def __post_init__(self) -> None:
        if sorted(self.order) != sorted(Dim) or self.order[0] is not Dim.TP:
            raise ValueError(f"expected an order of t, e, stage, replica with t first, "
                             f"got {[d.value for d in self.order]}")

    @property
    def name(self) -> str:
        return ",".join(dim.value for dim in self.order)

    def position(self, stage: int, replica: int, rank: int, config: IntraConfig,
                 num_stages: int, dp: int) -> int:
        """Mixed-radix position of rank (stage, replica, rank) in this layout."""
        digits = {Dim.TP: rank % config.tp, Dim.EP: rank // config.tp,
                  Dim.STAGE: stage, Dim.REPLICA: replica}
        radix = {Dim.TP: config.tp, Dim.EP: config.ep, Dim.STAGE: num_stages, Dim.REPLICA: dp}
        position, weight = 0, 1
        for dim in self.order:
            position += digits[dim] * weight
            weight *= radix[dim]
        return position

    def placement(self, config: IntraConfig, num_stages: int, dp: int,
                  device_order: tuple[int, ...] | list[int]) -> Placement:
        """The placement that puts each rank on the device at its position of ``device_order``."""
        return tuple(
            tuple(
                tuple(device_order[self.position(stage, replica, rank, config, num_stages, dp)]
                      for rank in range(config.devices))
                for replica in range(dp))
            for stage in range(num_stages))


MEGATRON_LAYOUT = RankLayout((Dim.TP, Dim.EP, Dim.REPLICA, Dim.STAGE))
NEST_LAYOUT = RankLayout((Dim.TP, Dim.EP, Dim.STAGE, Dim.REPLICA))


def all_layouts() -> tuple[RankLayout, ...]:
    """The six layouts of the structured space, Megatron's first (a deterministic order)."""
    others = [RankLayout((Dim.TP, *rest))
              for rest in itertools.permutations((Dim.EP, Dim.REPLICA, Dim.STAGE))]
    others.remove(MEGATRON_LAYOUT)
    return (MEGATRON_LAYOUT, *others)


def uniform_stages(num_layers: int, num_stages: int, recompute: str = "none") -> tuple[Stage, ...]:
    """Split ``num_layers`` into ``num_stages`` contiguous stages as evenly as possible.

    The last ``num_layers % num_stages`` stages get one layer more: later stages hold
    fewer microbatches in flight under 1F1B, so they have room for it.  ``recompute`` is
    "none", "all" or "all-but-last" (Megatron's usual choice: the last stage holds one
    microbatch in flight and needs no recomputation).
    """
    if not 1 <= num_stages <= num_layers:
        raise ValueError(f"expected 1 <= stages <= {num_layers} layers, got {num_stages}")
    if recompute not in ("none", "all", "all-but-last"):
        raise ValueError(f"expected recompute none, all or all-but-last, got {recompute!r}")
    base, extra = divmod(num_layers, num_stages)
    stages, first = [], 0
    for index in range(num_stages):
        size = base + (1 if index >= num_stages - extra else 0)
        flag = recompute == "all" or (recompute == "all-but-last" and index < num_stages - 1)
        stages.append(Stage(first, first + size - 1, flag))
        first += size
    return tuple(stages)
