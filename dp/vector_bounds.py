r"""The planner's fastest-path and case-split bounds on many data-parallel degrees at once.

:meth:`nest_cp.dp.planner._Search._shape_bound` bounds one shape (c, b, S, d, v, z) at a
time, in exact integers, a few hundred microseconds each.  At 10^5 devices there are a
million outer choices, tens of thousands of them with a compute bound below the optimum,
so the planner spends its time pricing them one by one (issue 35).  The d of one
(c, b, S, v) share everything but the group sizes and the microbatch count, so here the
same bounds are priced for every d at once, in float64 numpy, and rounded *down* with a
margin, which keeps them valid lower bounds:

- every ring collective's ticks, ceil((slope·V + offset) / den) (:class:`nest_cp.dp.pricing.
  LinearTicks`), is at least the real (slope·V + offset) / den, whose slope and offset over
  g ranks are X·(g − 1)/g and Y·(g − 1) with X and Y fixed per (kind, bytes, path)
  (:class:`nest_cp.dp.compose._RingForms`, cost model §3);
- so each term of :meth:`~nest_cp.dp.planner._Search._gather_bound` and
  :meth:`~nest_cp.dp.planner._Search._fresh_sync_bound` (a least over paths of sums of
  such ticks, or the mean ceil((Σ_s … − hidden) / S)) is at least the same expression with
  every ceiling dropped, a real number x;
- x is computed in float64 from a handful of operations on non-negative numbers (and one
  subtraction of an exact integer), each rounding by at most 2^-53 relatively, so the
  computed value lies within |x|·2^-40 + 1 of x for any |x| < 2^52 (ticks of a plan are far
  below that): :func:`lower_ticks` subtracts |x|·2^-30 + 1 and takes the floor, an integer
  <= x.

Each vector entry is then at most the planner's exact bound of the same shape and cap,
and so, like it, at most the cost of every plan of the shape.  The stage-by-stage bound
(:meth:`~nest_cp.dp.planner._Search._stagewise_bounds`) prices its stage weights the same
way, per distinct range and many d at a time, and takes the min-max over splits of the
lowered weights (at most the min-max of the exact ones) exactly, or bounds it from below
by bisection with :func:`nest_cp.dp.kernel.min_max_exceeds`.  Where a path's collective
is not a ring form (another cost model), :func:`ring_rates` says so and the planner prices
that (c, b, S, v) the exact way.
"""

from __future__ import annotations

import numpy as np

from nest_cp.dp.node_bounds import capped_group_paths
from nest_cp.model.network import NetworkModel, Path

MARGIN = 2.0**-30  # relative; far above the float64 rounding of the few operations


def lower_ticks(values: np.ndarray, scale: int = 0) -> np.ndarray:
    """An int64 array at most the real ``values`` entrywise, however the float operations
    that produced them rounded (module docstring): ``scale`` is the largest integer
    subtracted on the way (a cancellation's error is relative to it, not to the result).
    Magnitudes stay far below 2^52 (ticks of one iteration)."""
    values = np.asarray(values, dtype=np.float64)
    return np.floor(values - (np.abs(values) + scale) * MARGIN - 1.0).astype(np.int64)


def path_classes(network: NetworkModel, sizes: np.ndarray, cap: int | None,
                 above: int = -1) -> list[tuple[np.ndarray, tuple[Path, ...]]]:
    """The sizes (>= 2) split by the paths a group of that many ranks may run on —
    :func:`capped_group_paths` (g, cap, ``above``), or with ``cap`` None the fastest paths
    of any g devices (cap = G_0) — as (mask over ``sizes``, paths) pairs.

    Those paths depend on g only through the channel count min(g // 2, G_0, cap) and which
    tiers above ``above`` have domains holding ⌈g / cap⌉ nodes (tier 0 only if g <= cap;
    where none does, which hold g devices, as :func:`capped_group_paths` falls back): one
    representative of each class gives the class's paths."""
    domains = network.cluster.network.domain_sizes()
    limit = domains[0] if cap is None else cap
    sizes = np.asarray(sizes, dtype=np.int64)
    channels = np.minimum(np.minimum(sizes // 2, domains[0]), limit)
    admitted = _holding_codes(domains, sizes, limit, above)
    if limit < domains[0] and not admitted.all():  # where no domain holds the nodes
        admitted = np.where(admitted == 0, _holding_codes(domains, sizes, domains[0], above),
                            admitted)
    codes = channels * (1 << len(domains)) + admitted
    classes = []
    for code in np.unique(codes[sizes >= 2]).tolist():
        mask = (codes == code) & (sizes >= 2)
        representative = int(sizes[np.argmax(mask)])
        classes.append((mask, capped_group_paths(network, representative, limit, above)))
    return classes


def _holding_codes(domains: tuple[int, ...], sizes: np.ndarray, cap: int,
                   above: int = -1) -> np.ndarray:
    """Per size, bit K set iff tier K > ``above`` has domains holding ⌈size / cap⌉ nodes
    (tier 0 only if size <= cap): :func:`capped_group_paths`' rule."""
    nodes = -(-sizes // cap)
    admitted = np.zeros(len(sizes), dtype=np.int64)
    for tier, domain in enumerate(domains):
        if tier <= above:
            continue
        holds = nodes * domains[0] <= domain
        if tier == 0:
            holds &= sizes <= cap
        admitted |= holds.astype(np.int64) << tier
    return admitted


def ring_terms(rates: tuple[int, int, int, int], sizes: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Float slope per unit X·(g − 1)/g and offset Y·(g − 1) of the ring forms over g =
    ``sizes`` ranks, from (X numerator, X denominator, Y numerator, Y denominator)."""
    steps = sizes.astype(np.float64) - 1.0
    per_unit = rates[0] / rates[1]
    latency = rates[2] / rates[3]
    return per_unit * steps / sizes.astype(np.float64), latency * steps
