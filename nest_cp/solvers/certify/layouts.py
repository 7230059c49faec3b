"""Placement classes wider than the structured space: mixed-radix layouts of split
dimensions, padded blocks and piecewise layouts (issue 31's analysis,
``reports/structured_v3_analysis.md``).

A layout orders rank digits from innermost to outermost and reads the resulting position
through a device order (:func:`device_orders`); the classes (:func:`placements`):

- ``v2``: the 24 orders of (t, e, stage, replica) on the canonical device order;
- ``D``: those orders on every device order (the tier digits above tier 0 permuted);
- ``O``: D shifted by multiples of the node size;
- ``Pad``: D with the order's inner block (its first 1-3 dimensions) padded to node
  boundaries;
- ``R`` / ``Rdiv``: replica blocks (:class:`SplitLayout`, a = S, 2 <= k < d; Rdiv: k | d);
- ``S``: stage blocks (k = d, 2 <= a < S); ``SR``: both;
- ``P``: piecewise: stages rotated, cut into at most three segments, each laid out by
  (t, e, stage, replica) or (t, e, replica, stage) in its own block of positions.

Every generator is a deterministic enumeration; a placement is only a candidate, priced
(and checked) by the evaluator wherever it is used.  Used by the certificate's layout
probe (:mod:`nest_cp.solvers.certify.probe`) and ``benchmarks/structured_v3.py``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from nest_cp.model.instance import HierarchicalNetwork
from nest_cp.model.plan import Dim, all_layouts

DIGITS = ("t", "e", "s_in", "s_out", "r_in", "r_out")


@dataclass(frozen=True, slots=True)
class SplitLayout:
    """A mixed-radix order of (t, e, s_in, s_out, r_in, r_out), innermost first.

    ``stage_block`` is a (s_in's radix), ``replica_block`` k (r_in's radix); the outer
    digits have radix ceil(S/a) and ceil(d/k).
    """

    order: tuple[str, ...]
    stage_block: int
    replica_block: int

    @property
    def name(self) -> str:
        return f"{','.join(self.order)} a={self.stage_block} k={self.replica_block}"

    def radices(self, tp: int, ep: int, stages: int, replicas: int) -> dict[str, int]:
        return {"t": tp, "e": ep, "s_in": self.stage_block,
                "s_out": math.ceil(stages / self.stage_block), "r_in": self.replica_block,
                "r_out": math.ceil(replicas / self.replica_block)}

    def positions(self, tp: int, ep: int, stages: int, replicas: int) -> np.ndarray:
        """positions[stage, replica, rank] (rank j = t_index + t·e_index)."""
        stage = np.arange(stages)[:, None, None]
        replica = np.arange(replicas)[None, :, None]
        rank = np.arange(tp * ep)[None, None, :]
        digits = {"t": rank % tp, "e": rank // tp, "s_in": stage % self.stage_block,
                  "s_out": stage // self.stage_block, "r_in": replica % self.replica_block,
                  "r_out": replica // self.replica_block}
        radix = self.radices(tp, ep, stages, replicas)
        position, weight = np.zeros((stages, replicas, tp * ep), dtype=np.int64), 1
        for digit in self.order:
            position = position + digits[digit] * weight
            weight *= radix[digit]
        return position


def layouts_of_class(name: str, tp: int, ep: int, stages: int, replicas: int,
                     max_block: int) -> list[SplitLayout]:
    """The distinct layouts of class ``name`` at this shape (radix-1 digits dropped)."""
    if name == "v2":
        blocks = [(stages, replicas)]
    elif name in ("R", "Rdiv"):
        blocks = [(stages, k) for k in _blocks(replicas, max_block, name == "Rdiv")]
    elif name == "S":
        blocks = [(a, replicas) for a in _blocks(stages, max_block, False)]
    else:
        blocks = [(a, k) for a in _blocks(stages, max_block, False)
                  for k in _blocks(replicas, max_block, False)]
    seen, layouts = set(), []
    for a, k in blocks:
        radix = SplitLayout(DIGITS, a, k).radices(tp, ep, stages, replicas)
        live = tuple(digit for digit in DIGITS if radix[digit] > 1)
        for order in itertools.permutations(live):
            if (order, a, k) not in seen:
                seen.add((order, a, k))
                layouts.append(SplitLayout(order, a, k))
    return layouts


def _blocks(size: int, max_block: int, divisors_only: bool) -> list[int]:
    """Inner block sizes 2..size−1: every one up to ``max_block``, and every divisor."""
    return [block for block in range(2, size)
            if size % block == 0 or (not divisors_only and block <= max_block)]


def device_orders(network: HierarchicalNetwork, num_devices: int) -> dict[str, list[int]]:
    """Canonical device orders with the tier digits above tier 0 permuted (slot innermost).

    A device id is the mixed-radix number (slot, tier-1 index, ..., top index) of the
    network's tier sizes; order ``(0, 2, 1)`` reads positions with the tier-2 index varying
    before the tier-1 index, so consecutive tier-0 blocks of positions go to different
    tier-1 domains.  ``(0, 1, 2, ...)`` is the canonical order (ids 0..N−1).  Where N is
    not a multiple of the domain below the top tier (a partly populated network) the digits
    are not a mixed-radix number of N, and only the canonical order is returned (as the
    structured space's device orders, :func:`nest_cp.model.plan.digit_radices`).
    """
    sizes = [tier.size for tier in network.tiers[:-1]]
    below_top = math.prod(sizes)
    if num_devices % below_top:
        return {"".join(map(str, range(len(sizes) + 1))): list(range(num_devices))}
    sizes.append(num_devices // below_top)
    orders = {}
    for upper in itertools.permutations(range(1, len(sizes))):
        order = (0, *upper)
        devices = []
        for position in range(num_devices):
            digits, rest = [0] * len(sizes), position
            for index in order:
                digits[index], rest = rest % sizes[index], rest // sizes[index]
            device, weight = 0, 1
            for index, size in enumerate(sizes):
                device, weight = device + digits[index] * weight, weight * size
            devices.append(device)
        orders["".join(map(str, order))] = devices
    return orders


def placements(name: str, plan, devices: dict[str, list[int]], node: int,
               max_block: int, max_piecewise: int, max_segments: int = 3):
    """(layout name, placement) of every layout of class ``name`` at the shape of ``plan``
    (its configuration, S and d), the placement None where the layout does not fit (a
    position beyond the last device); ``devices`` as :func:`device_orders` gives them,
    ``node`` the tier-0 domain size; class P only for S <= ``max_piecewise``, with at
    most ``max_segments`` segments."""
    config, stages, replicas = plan.config, plan.num_stages, plan.num_replicas
    tp, ep, width = config.tp, config.ep, config.devices
    num_devices = len(next(iter(devices.values())))
    used = width * stages * replicas
    canonical = min(devices)  # "012...": ids 0..N−1
    orders = {canonical: devices[canonical]} if name == "v2" else devices
    if name in ("v2", "D", "O"):
        offsets = range(0, num_devices - used + 1, node) if name == "O" else (0,)
        for (order_name, order), layout, offset in itertools.product(
                orders.items(), all_layouts(), offsets):
            positions = layout.positions(config, stages, replicas) + offset
            yield f"{layout.name} dev={order_name} offset={offset}", map_positions(positions, order)
    elif name == "Pad":
        for (order_name, order), layout, cut in itertools.product(
                orders.items(), all_layouts(), range(1, 4)):
            positions = padded_positions(layout, cut, config, stages, replicas, node)
            if positions is not None:
                yield (f"{layout.name} pad-after={cut} dev={order_name}",
                       map_positions(positions, order))
    elif name == "P":
        if stages <= max_piecewise:
            yield from piecewise(plan, orders, max_segments)
    else:
        for layout in layouts_of_class(name, tp, ep, stages, replicas, max_block):
            positions = layout.positions(tp, ep, stages, replicas)
            for order_name, order in orders.items():
                yield f"{layout.name} dev={order_name}", map_positions(positions, order)


def padded_positions(layout, cut: int, config, stages: int, replicas: int, node: int):
    """Positions of ``layout`` with its inner block (the first ``cut`` dimensions of the
    order) padded to node boundaries: a block of B > n0 positions takes ceil(B/n0)·n0,
    one of B < n0 the least divisor of n0 >= B (so no block straddles a node); None when
    the padding changes nothing."""
    radix = {Dim.TP: config.tp, Dim.EP: config.ep, Dim.STAGE: stages, Dim.REPLICA: replicas}
    block = math.prod(radix[dim] for dim in layout.order[:cut])
    if block >= node:
        padded = math.ceil(block / node) * node
    else:
        padded = min(size for size in range(block, node + 1) if node % size == 0)
    if padded == block:
        return None
    digits = {Dim.TP: np.arange(config.devices)[None, None, :] % config.tp,
              Dim.EP: np.arange(config.devices)[None, None, :] // config.tp,
              Dim.STAGE: np.arange(stages)[:, None, None],
              Dim.REPLICA: np.arange(replicas)[None, :, None]}
    position, weight = np.zeros((stages, replicas, config.devices), dtype=np.int64), 1
    for index, dim in enumerate(layout.order):
        if index == cut:
            weight = padded
        position = position + digits[dim] * weight
        weight *= radix[dim]
    return position


def piecewise(plan, orders: dict[str, list[int]], max_segments: int = 3):
    """Piecewise layouts: the stages, rotated by s0, cut into at most ``max_segments``
    (<= 3) segments of
    consecutive stages; segment i takes the positions a·d·lo_i .. a·d·hi_i − 1 (regions in
    rotated stage order) and lays them out with (t, e, stage, replica) or
    (t, e, replica, stage) over its own stages."""
    config, stages, replicas = plan.config, plan.num_stages, plan.num_replicas
    width = config.devices
    inner = [layout for layout in all_layouts()
             if layout.order[:2] in ((Dim.TP, Dim.EP), (Dim.EP, Dim.TP))
             and (layout.order[0] is Dim.TP or config.tp == 1)][:2]
    for rotation in range(stages):
        for cuts in itertools.chain.from_iterable(
                itertools.combinations(range(1, stages), count)
                for count in range(min(max_segments, 3))):
            bounds = (0, *cuts, stages)
            segments = list(zip(bounds, bounds[1:]))
            for choice in itertools.product(inner, repeat=len(segments)):
                positions = np.zeros((stages, replicas, width), dtype=np.int64)
                for (low, high), layout in zip(segments, choice):
                    local = layout.positions(config, high - low, replicas)
                    for rotated in range(low, high):
                        positions[(rotated + rotation) % stages] = (
                            local[rotated - low] + width * replicas * low)
                for order_name, order in orders.items():
                    yield (f"rot={rotation} cuts={cuts} "
                           f"orders={[layout.name for layout in choice]} dev={order_name}",
                           map_positions(positions, order))


def map_positions(positions: np.ndarray, order: list[int]):
    """The placement putting each rank on ``order[position]``; None when a position is
    beyond the last device (the layout does not fit)."""
    if positions.max() >= len(order):
        return None
    devices = np.asarray(order, dtype=np.int64)[positions]
    return tuple(tuple(tuple(int(x) for x in ranks) for ranks in reps)
                 for reps in devices.tolist())
