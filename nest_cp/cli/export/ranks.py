"""Global ranks, hosts and launcher nodes: realising a plan's placement under a rank order.

A training framework fixes which role each global rank plays: rank g is
(stage, replica, tensor index, context index, expert index) by a mixed-radix order of
those dimensions (Megatron-LM's ``tp-cp-ep-dp-pp`` reads innermost first: the tensor
index varies fastest, then the context index, the pipeline stage slowest).  Within a
stage replica the plan numbers its ranks j = t_index + t·c_index + t·c·e_index (DESIGN
§3.4), so a role's device is ``placement[stage][replica][j]``.  The plan fixes which device
runs each role.  So the rank map is forced: global rank g runs on the device
the plan places g's role on.  What the framework cannot choose is left to the
launcher: torchrun gives node rank k the global ranks after those of node
ranks 0..k-1 (torch.distributed.elastic's ``_assign_worker_ranks``: offset =
sum of the lower agents' local world sizes), and local rank i the i-th GPU of
``CUDA_VISIBLE_DEVICES``.

Hence the exact criterion: the placement can be launched with one torchrun
agent per host iff every host's global ranks are consecutive.  When they are
not, :func:`rank_map` still realises the placement, with one agent per maximal
run of consecutive ranks on a host (several agents on that host, each with its
own node rank and ``CUDA_VISIBLE_DEVICES``), and names those hosts so the
exporter can warn.

Hosts: on a hierarchical network a host is a block of ``gpus_per_node``
consecutive device ids (default: the innermost tier's size, the NVLink
domain); on a graph network the number must be given.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from nest_cp.cli.export.view import PlanView
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.instance import HierarchicalNetwork, Instance


class Axis(str, Enum):
    """The five rank dimensions a launcher orders: tensor, context, expert, stage, replica."""

    TP = "t"
    CP = "c"
    EP = "e"
    STAGE = "stage"
    REPLICA = "replica"


@dataclass(frozen=True, slots=True)
class RankOrder:
    """A framework's rank order: all five axes from innermost (fastest) to outermost."""

    name: str
    dims: tuple[Axis, ...]

    def __post_init__(self) -> None:
        if sorted(self.dims) != sorted(Axis):
            raise ValueError(f"expected each of {[a.value for a in Axis]} once, got "
                             f"{[a.value for a in self.dims]}")


@dataclass(frozen=True, slots=True)
class RankRole:
    """What a global rank does: its stage, replica and tensor, context and expert index."""

    stage: int
    replica: int
    tp_index: int
    cp_index: int
    ep_index: int


@dataclass(frozen=True, slots=True)
class RankEntry:
    """Global ``rank``: its role (stage, replica, tensor, context and expert index) and its
    GPU."""

    rank: int
    stage: int
    replica: int
    tp_index: int
    ep_index: int
    device: int
    host: int
    local_gpu: int
    cp_index: int = 0


@dataclass(frozen=True, slots=True)
class LaunchNode:
    """One torchrun agent: node rank, host, ``CUDA_VISIBLE_DEVICES``, its global ranks."""

    node_rank: int
    host: int
    gpus: tuple[int, ...]
    first_rank: int

    @property
    def last_rank(self) -> int:
        return self.first_rank + len(self.gpus) - 1


@dataclass(frozen=True, slots=True)
class RankMap:
    """Every global rank's role and GPU, and the launcher nodes that start them."""

    order: RankOrder
    gpus_per_node: int
    entries: tuple[RankEntry, ...]
    nodes: tuple[LaunchNode, ...]

    @property
    def split_hosts(self) -> tuple[int, ...]:
        """Hosts that need more than one launcher agent (their ranks are not consecutive)."""
        seen, split = set(), []
        for node in self.nodes:
            if node.host in seen and node.host not in split:
                split.append(node.host)
            seen.add(node.host)
        return tuple(split)

    @property
    def one_agent_per_host(self) -> bool:
        return not self.split_hosts

    def as_dicts(self) -> list[dict]:
        return [{"rank": e.rank, "stage": e.stage, "replica": e.replica,
                 "tp_index": e.tp_index, "ep_index": e.ep_index,
                 **({"cp_index": e.cp_index} if self.context else {}), "device": e.device,
                 "host": host_name(e.host), "local_gpu": e.local_gpu} for e in self.entries]

    @property
    def context(self) -> bool:
        """Whether some rank has a context index above 0 (c > 1)."""
        return any(entry.cp_index for entry in self.entries)

    def nodes_as_dicts(self) -> list[dict]:
        return [{"node_rank": n.node_rank, "host": host_name(n.host),
                 "cuda_visible_devices": ",".join(map(str, n.gpus)),
                 "first_rank": n.first_rank, "last_rank": n.last_rank} for n in self.nodes]


def host_name(host: int) -> str:
    """The placeholder name of host ``host`` (the block of devices it holds)."""
    return f"node{host}"


def default_gpus_per_node(instance: Instance, requested: int | None) -> int:
    """``requested``, or the innermost tier's size; graph networks need it given."""
    if requested is not None:
        if requested < 1:
            raise BackendOptionError(f"expected --gpus-per-node >= 1, got {requested}")
        return requested
    network = instance.cluster.network
    if isinstance(network, HierarchicalNetwork):
        return network.tiers[0].size
    raise BackendOptionError("--gpus-per-node: expected the GPUs of one host (a graph network "
                             "does not say which devices share a host)")


def rank_roles(order: RankOrder, view: PlanView) -> list[RankRole]:
    """The role of every global rank under ``order`` (mixed radix, innermost axis first)."""
    radix = {Axis.TP: view.tp, Axis.CP: view.cp, Axis.EP: view.ep,
             Axis.STAGE: view.num_stages, Axis.REPLICA: view.replicas}
    roles = []
    for rank in range(view.world_size):
        digits, rest = {}, rank
        for axis in order.dims:
            digits[axis], rest = rest % radix[axis], rest // radix[axis]
        roles.append(RankRole(digits[Axis.STAGE], digits[Axis.REPLICA], digits[Axis.TP],
                              digits[Axis.CP], digits[Axis.EP]))
    return roles


def role_device(view: PlanView, role: RankRole) -> int:
    """The device the plan places ``role`` on: intra-replica rank j = t + t·(c_index +
    c·e_index) of its stage replica."""
    j = role.tp_index + view.tp * (role.cp_index + view.cp * role.ep_index)
    return view.placement[role.stage][role.replica][j]


def rank_map(view: PlanView, order: RankOrder, gpus_per_node: int) -> RankMap:
    """The forced rank map of ``view`` under ``order`` and its launcher nodes (module doc)."""
    entries = []
    for rank, role in enumerate(rank_roles(order, view)):
        device = role_device(view, role)
        entries.append(RankEntry(rank, role.stage, role.replica, role.tp_index, role.ep_index,
                                 device, device // gpus_per_node, device % gpus_per_node,
                                 role.cp_index))
    nodes: list[LaunchNode] = []
    start = 0
    for rank in range(1, len(entries) + 1):
        if rank == len(entries) or entries[rank].host != entries[start].host:
            run = entries[start:rank]
            nodes.append(LaunchNode(len(nodes), run[0].host,
                                    tuple(entry.local_gpu for entry in run), start))
            start = rank
    return RankMap(order, gpus_per_node, tuple(entries), tuple(nodes))


def launch_table(rank_map_: RankMap, comment: str = "#") -> list[str]:
    """One line per launcher node: node rank, host, CUDA_VISIBLE_DEVICES, global ranks."""
    lines = [f"{comment} node_rank  host      CUDA_VISIBLE_DEVICES  global ranks"]
    for node in rank_map_.nodes:
        ranks = f"{node.first_rank}" if node.last_rank == node.first_rank else \
            f"{node.first_rank}-{node.last_rank}"
        lines.append(f"{comment} {node.node_rank:<10} {host_name(node.host):<9} "
                     f"{','.join(map(str, node.gpus)):<21} {ranks}")
    return lines


def node_selection(rank_map_: RankMap, argument: str, what: str) -> list[str]:
    """Shell lines of a launch script that pick this node's host and GPUs from its node rank
    (first argument), read the master address (second) and ``argument`` (third, ``what``),
    then export CUDA_VISIBLE_DEVICES and set NPROC, the torchrun processes of the node."""
    lines = ["NODES=("]
    lines += [f'  "{host_name(node.host)} {",".join(map(str, node.gpus))}"'
              for node in rank_map_.nodes]
    return lines + [")",
                    'NODE_RANK=${1:?node rank}; MASTER_ADDR=${2:?master address}; '
                    f'{argument}=${{3:?{what}}}; shift 3',
                    'read -r HOST GPUS <<< "${NODES[$NODE_RANK]}"',
                    'export CUDA_VISIBLE_DEVICES=$GPUS',
                    'NPROC=$(( $(tr -cd , <<< "$GPUS" | wc -c) + 1 ))']
