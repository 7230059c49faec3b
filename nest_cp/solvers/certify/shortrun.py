r"""The short-run bound: a sync group that runs several ring channels needs, at every stage
it syncs, a replica whose run of stages in one node is short, and a short run needs
pipeline boundaries that leave the node close to that stage.

Covers the *main* plans of a shape (c, b, S, d, z) on a block chain (``c = 1``,
geometry), S >= 2, when

(R) every present intra family has k_min = 0 and joins all a = t·e ranks at level 0
    (``geo.joined[0] == a``), a fits the largest tier-0 domain G_0, the dense sync group
    has more than one member, and d·a > G_0.

Let q = ⌊G_0 / a⌋ (>= 1).

Claim.  For any Θ every such plan P has T(P) >= min(A, B), A = (m + S − 1)·τ_path + Θ,
B = (m + S − 1)·max(τ_path, τ_Θ) + σ, σ = max(σ_lb, σ_div), with τ_path the (packed) path
bound's τ, σ_lb the placement-free sync bound, σ_div the divided sync below and τ_Θ the
least cap at which the count search below holds (searched only from τ_path up: ``tau``);
the bound is the largest min(A, B) over the candidate Θ (each is a valid bound, so the
largest is).

Rows (block chains, per stage over block counts, the least over the modes that fit,
suffix minima, so non-decreasing and at most the real value, as in
:meth:`~nest_cp.solvers.certify.bounds.FastBounds._stage_rows`): Y_s the placement-free
sync row (``_sync_row``); W^k_s, for k = 1..q, the same with the dense group priced only
on tiers >= 1 on at most e·k ring channels and the expert group only on tiers >= 1 on at
most k (the divided-channel bound's rows with k_d = k); from the path bound's
``combo_rows`` (paths step 2), N_s the least over every combo stage s can have, OUT_s the
least over the combos whose output boundary has a class >= 1 admitting a pair, IN_s the
same for the input boundary.  For a count c let k_s(c) be the largest k <= q with
W^k_s(c) >= Θ (0 when none) and L_s(c) = L(k_s(c)), where L(0) = q and, for k >= 1, L(k)
is the largest w <= ⌊q / (k + 1)⌋ for which d is a sum of integers in [k + 1, ⌊q / w⌋] —
some m >= 1 has m·(k + 1) <= d <= m·⌊q / w⌋ — and 0 when no w >= 1 is (``window``);
k_s is non-decreasing in c (a W^k row is non-decreasing in c and never rises with k: a
ring collective's price never rises with its channels) and L never rises with k (the
interval [k + 1, ⌊q / w⌋] only shrinks), so L_s is non-increasing.  (The condition on w
is ⌈d / M⌉ <= ⌊d / (k + 1)⌋ with M = ⌊q / w⌋, i.e. ⌊d / ⌈d / M⌉⌋ >= k + 1: a group of d
members at most M per domain has at most that many in its fewest.)  With
k_d = ⌊d / ⌈d / q⌉⌋ (<= q), σ_div is the min-max over block counts of max_s
max(Y_s, W^{k_d}_s) (``FastBounds._min_max``, a lower bound on it).

Count search.  ``holds(cap)``: there are counts (c_s), Σ c_s >= n, each at least the
fewest its stage must hold, with N_s(c_s) <= cap and Y_s(c_s) < Θ for every s, and, calling
a boundary b (stage b → b + 1) *cuttable* when OUT_b(c_b) <= cap and IN_{b+1}(c_{b+1}) <=
cap, for every s: j*(s) − i*(s) + 1 <= L_s(c_s), where i*(s) is 1 + the
last cuttable boundary before s (0 if none) and j*(s) the first cuttable boundary at or
after s (S − 1 if none).

Proof.  Fix a main plan P with counts (c_s).  If T_sync(P) >= Θ, T(P) >= A (τ_max(P) >=
τ_path: paths, packed).  Otherwise:

1. Y_s(c_s) <= T_sync(P) < Θ for every s (bounds step 3), and N_s(c_s) <= τ(s, r) <=
   τ_max(P) for every replica r (paths step 2: the row of the combo (s, r) has).
2. Take s with k = k_s(c_s) >= 1.  In a main plan each stage replica (s, r) lies in one
   tier-0 domain (its families join all a ranks at level 0 with k_min = 0: geometry's
   lemma, J_0 = a); let n_D be the number of stage replicas of s in domain D.  Every
   dense sync group G of s (one per tensor index: that rank of every replica, every
   expert index) has e·n_D members in each such D and every expert group H n_D; neither
   lies on tier 0 (all d stage replicas in one domain would take d·a > G_0 devices, (R)),
   so each lies on a tier >= 1 admitting its size.  If n_D <= k for some D holding a
   stage replica of s, G's ring channels (its fewest members in a tier-0 domain it
   touches, cost model §5 a, capped further by ``Tier.channel_cap``) are at most e·k and
   H's at most k, and as in bounds step 3 (each term at least its price on its tier with
   that many channels) the exposed sync of s is at least W^k_s(c_s) >= Θ > T_sync(P),
   which is impossible.  So every such D has n_D >= k + 1.
3. Let w = j*(s) − i*(s) + 1 with the cap τ_max(P).  Every boundary b strictly inside
   [i*(s), j*(s)] (i*(s) <= b < j*(s)) is not cuttable: by the choice of i* and j*, no
   boundary from i*(s) to s − 1 or from s to j*(s) − 1 is.  So in every replica r it has
   class 0: a class >= 1 admitting a pair (it holds one) would give τ(b, r) >=
   OUT_b(c_b) and τ(b + 1, r) >= IN_{b+1}(c_{b+1}) (paths step 2, the least over the
   combos they may have), one of them above the cap τ_max(P).  So every replica's level-0
   run through s (the maximal run of stages joined by class-0 boundaries, geometry)
   contains [i*(s), j*(s)]: it has at least w stages, |R|·a >= w·a ranks, all in the
   tier-0 domain of its stage replica of s (geometry's lemma with J_0 = a).
3'. So w·a <= G_0 and w <= q = L(0) for every s: with k_s(c_s) = 0 that is the count
   search's condition; with k_s(c_s) >= 1 step 4 gives the tighter one.
4. Take any domain D holding a stage replica of s: its n_D replicas' runs through s are
   disjoint devices in D (the placement is injective, DESIGN §2), so n_D·w·a <= |D| <=
   G_0 and n_D <= ⌊q / w⌋; by 2, n_D >= k + 1.  Each replica's stage replica of s lies in
   exactly one domain, so d = Σ n_D over the m >= 1 domains holding one: m·(k + 1) <= d
   <= m·⌊q / w⌋ (so w <= ⌊q / (k + 1)⌋ too).  Hence w <= L(k) = L_s(c_s) (L takes the
   largest such w).  Where ⌊q / w⌋ = k + 1 the interval is {k + 1}, which must then
   divide d: e.g. k = 1, q = 8 and an odd d (51) allow no window of 3 or 4 stages
   (⌊8 / 3⌋ = ⌊8 / 4⌋ = 2), only of 2 or 1.
5. T_sync(P) >= σ_div: every stage replica of every stage lies whole in one tier-0
   domain (step 2's lemma), so each domain holds n_D <= q replicas of a stage, an
   expert sync group touches >= ⌈d / q⌉ domains and runs at most k_d channels, the dense
   group at most e·k_d, and the exposed sync of s is at least W^{k_d}_s(c_s) (the
   divided-channel bound's step 2, whose premise — no family raised — every main plan
   meets); it is also >= Y_s(c_s), and the min-max is at most max_s of the larger.
6. So P's counts pass ``holds(τ_max(P))``.  ``holds`` is monotone in the cap (a larger cap
   keeps every condition on the counts and only adds cuttable boundaries, which moves
   i*(s) right and j*(s) left) and changes only at row values (N, OUT, IN), so τ_Θ, the
   least such value with ``holds`` (bisection), is <= τ_max(P); with τ_max(P) >= τ_path
   and T_sync(P) >= σ (step 5), T(P) >= B.  ∎

The search (``_holds``) runs over the stages in order, keeping per state (whether the
last stage's count has OUT <= cap, its distance from i*, how far the first cuttable
boundary may still be) the most blocks so far; counts in a stage are tried only at the
largest value of each class (same OUT and IN tests, same L), which loses nothing, as a
stage's count only adds blocks and every condition is otherwise the class's.  Σ c_s >= n
suffices: lowering counts to n keeps every condition (the rows are non-decreasing, L_s
non-increasing in c).

Candidates Θ: the values of the Y and W^k rows above σ (a Θ <= σ_div puts every main
plan in case A).  A rises with Θ and B never does
(a larger Θ only weakens the conditions), and on each interval between two candidates the
conditions are those of its upper end; so min(A, B) is largest where A and B cross, found
by bisection over the sorted candidates with a logarithmic number of searches — a count,
not a clock: the same on any machine.

Joint form (``joint``): with the candidates v_1 < ... < v_J, v_0 = σ and v_{J+1} = +inf,
let Θ(C) for a cap C be the least v_j, j >= 1, at which the count search holds at C.  Then
every such plan has T(P) >= min over caps C >= τ_path of (m + S − 1)·C + max(σ, v_{j−1})
with v_j = Θ(C) (a cap at which the search holds for no Θ drops out).  Proof: take P, x =
T_sync(P) >= σ (step 5) and j >= 1 with v_{j−1} <= x < v_j.  The count conditions at Θ = v_j
are those at any Θ in (x, v_j] (they change only at candidates), and T_sync(P) < Θ there,
so steps 1-6 give ``holds(τ_max(P))`` at v_j, and at C, the largest cap <= τ_max(P) (the
search changes only at row values): Θ(C) <= v_j, so v_{j−1} >= the candidate below Θ(C)
and T(P) = (m + S − 1)·τ_max(P) + x >= (m + S − 1)·C + max(σ, that candidate).  ``holds``
is monotone in Θ (a larger Θ only weakens the conditions), so Θ(C) is found by
bisection; the caps are tried upwards and stop where (m + S − 1)·C + σ reaches the least
term so far.  It is at least min(A, B) at no Θ in general, so the bound takes the larger.
"""

from __future__ import annotations

import math

import numpy as np

from nest_cp.solvers.certify.bounds import INF, FastBounds
from nest_cp.solvers.certify.divided import divided_channels, replicas_divide_nodes
from nest_cp.solvers.certify.geometry import NONE, Geometry
from nest_cp.solvers.certify.split import best_of_crossing, largest_per_class, least_passing


class ShortRunBound:
    """The rows of the module docstring for one shape; :meth:`bound` per (τ_path, σ_lb)."""

    def __init__(self, shape, geo: Geometry, fast: FastBounds):
        self.shape, self.geo, self.fast = shape, geo, fast
        self.applies = self._applies()
        if not self.applies:
            return
        ep, dp, zero = shape.config.ep, shape.dp, shape.zero
        self.per_domain = max(geo.tiers[0].domains) // geo.ranks  # q
        rows: dict = {}  # one sync row per (stage kind, channels): the stages share them

        def sync_row(kind, channels: int | None) -> np.ndarray:
            if (kind, channels) not in rows:
                rows[kind, channels] = fast._sync_row(kind, dp, zero) if channels is None \
                    else fast._sync_row(kind, dp, zero, dense_from=1,
                                        dense_channels=ep * channels, expert_from=1,
                                        expert_channels=channels)
            return rows[kind, channels]

        self.sync = np.stack(fast._stage_rows(shape, lambda kind, mode: sync_row(kind, None)))
        self.thin = [np.stack(fast._stage_rows(shape, lambda kind, mode, k=k: sync_row(kind, k)))
                     for k in range(1, self.per_domain + 1)]
        self.normal, self.sends, self.receives = self._transfer_rows()
        self.lows = [int(low) for low in fast.fewest_blocks(shape.num_stages)]
        # σ_div: every main plan's sync, its groups on at most k_d channels (docstring)
        divided = self.thin[divided_channels(dp, self.per_domain) - 1]
        self.divided_sync = fast._min_max(list(np.maximum(self.sync, divided)), shape)
        # L(k) for k = 0 .. q: depends on the shape only, not on Θ; L(0) = q, a node run's
        # most stages (module docstring, step 3')
        self.windows = np.array([self.per_domain] + [self.window(k)
                                                     for k in range(1, len(self.thin) + 1)],
                                dtype=np.int64)

    def _applies(self) -> bool:
        return self.shape.num_stages >= 2 and replicas_divide_nodes(self.geo, self.shape,
                                                                     self.fast)

    def _transfer_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """N, OUT and IN per stage (module docstring), from the path bound's combo rows."""
        fast, shape, geo = self.fast, self.shape, self.geo
        every = [t.index for t in geo.tiers if t.admits(2)]
        last = shape.num_stages - 1
        rows = {}

        def least(combos: list[tuple[int, int]], stage: int) -> np.ndarray:
            row = np.full(fast.chain.blocks + 1, INF, dtype=np.int64)
            for combo in combos:
                if combo not in rows:
                    rows[combo] = fast.combo_rows(shape, geo.k_min, combo)
                row = np.minimum(row, rows[combo][stage])
            return row

        normal, sends, receives = [], [], []
        for stage in range(shape.num_stages):
            ins = [NONE] if stage == 0 else every
            outs = [NONE] if stage == last else every
            normal.append(least([(i, o) for i in ins for o in outs], stage))
            sends.append(least([(i, o) for i in ins for o in outs if o >= 1], stage))
            receives.append(least([(i, o) for i in ins for o in outs if i >= 1], stage))
        return np.stack(normal), np.stack(sends), np.stack(receives)

    def window(self, channels: int) -> int:
        """L for k = ``channels`` >= 1: the longest window w <= ⌊q / (k + 1)⌋ for which d is
        a sum of integers in [k + 1, ⌊q / w⌋] (some m with m·(k + 1) <= d <= m·⌊q / w⌋); 0
        when none is."""
        for width in range(self.per_domain // (channels + 1), 0, -1):
            # m·(k + 1) <= d <= m·M for some m  <=>  ⌊d / ⌈d / M⌉⌋ >= k + 1 (docstring)
            if divided_channels(self.shape.dp, self.per_domain // width) >= channels + 1:
                return width
        return 0

    def _limits(self, theta: int) -> np.ndarray:
        """L_s(c) per stage and count at Θ (L(0) = q where no channel more is needed)."""
        needed = np.zeros(self.sync.shape, dtype=np.int64)  # k_s(c)
        for k, rows in enumerate(self.thin, start=1):
            needed = np.where(rows >= theta, k, needed)
        return self.windows[needed]

    def _holds(self, cap: int, theta: int, limits: np.ndarray) -> bool:
        """The count search of the module docstring at one cap."""
        blocks = self.fast.chain.blocks
        allowed = (self.normal <= cap) & (self.sync < theta)
        sends, receives = self.sends <= cap, self.receives <= cap
        reach = int(limits.max(initial=0))
        # state: (last count sends out, distance from i*, slack to the first cut or None)
        states: dict[tuple, int] = {(False, 0, None): 0}  # before stage 0: nothing held
        for stage in range(self.shape.num_stages):
            grown: dict[tuple, int] = {}
            for count in self._classes(stage, allowed, sends, receives, limits):
                limit = int(limits[stage, count])
                ships = bool(sends[stage, count])
                for (shipped, distance, slack), held in states.items():
                    # stage 0 starts a run; a boundary both sides can cross cuts one
                    if stage == 0 or (shipped and bool(receives[stage, count])):
                        distance, slack = 0, None
                    elif slack == 0:
                        continue  # the window of an earlier stage passed its length
                    else:
                        distance = min(distance + 1, reach)
                        slack = None if slack is None else slack - 1
                    if distance > limit - 1:
                        continue
                    own = limit - 1 - distance
                    slack = own if slack is None else min(slack, own)
                    key = (ships, distance, slack)
                    total = held + count
                    if total > grown.get(key, -1):
                        grown[key] = total
            states = grown
            if not states:
                return False
        return max(states.values()) >= blocks

    def _classes(self, stage: int, allowed, sends, receives, limits) -> list[int]:
        """The largest count of each class of the stage (same OUT and IN tests, same L)
        within what the stage may hold."""
        def key(count: int):
            if not allowed[stage, count]:
                return None
            return (bool(sends[stage, count]), bool(receives[stage, count]),
                    int(limits[stage, count]))

        return [count for count, _ in
                largest_per_class(self.fast.chain.blocks, self.lows[stage], key)]

    def tau(self, theta: int, floor: int) -> float:
        """max(floor, τ_Θ): the least of ``floor`` and the row values above it at which the
        count search holds (``holds`` changes only at row values and is monotone, so if
        τ_Θ <= floor it holds at ``floor``, and otherwise τ_Θ is a row value above it)."""
        limits = self._limits(theta)
        return least_passing(self._caps(floor), lambda cap: self._holds(cap, theta, limits))

    def _caps(self, floor: int) -> np.ndarray:
        """``floor`` and the N, OUT and IN row values above it, ascending: the caps at which
        the count search can change."""
        values = np.concatenate((self.normal.ravel(), self.sends.ravel(),
                                 self.receives.ravel()))
        return np.concatenate(([floor], np.unique(values[(values < INF) & (values > floor)])))

    def bound(self, tau_path: float, sigma_lb: float) -> float:
        """The largest min(A, B) over the candidate Θ (-inf when the bound does not apply),
        with σ = max(``sigma_lb``, σ_div) in B (module docstring)."""
        if not self.applies or not math.isfinite(tau_path) or not math.isfinite(sigma_lb):
            return -math.inf
        sigma = max(sigma_lb, self.divided_sync)
        if not math.isfinite(sigma):
            return -math.inf
        rounds = self.shape.rounds
        values = np.concatenate([self.sync.ravel(), *(rows.ravel() for rows in self.thin)])
        candidates = np.unique(values[(values < INF) & (values > sigma)])
        if candidates.size == 0:
            return -math.inf
        taus: dict[int, float] = {}
        floor = int(tau_path)

        def pair(index: int) -> tuple[float, float]:
            theta = int(candidates[index])
            if theta not in taus:
                taus[theta] = self.tau(theta, floor)
            return rounds * tau_path + theta, rounds * taus[theta] + sigma

        # τ_Θ never rises with Θ: if the least candidate leaves it at τ_path, B is the path
        # bound for every Θ and min(A, B) adds nothing
        if pair(0)[1] <= rounds * tau_path + sigma:
            return -math.inf

        # A rises with Θ and B never does: the best min(A, B) is where they cross
        crossing = best_of_crossing(pair, len(candidates))
        return max(crossing, self.joint(floor, sigma, candidates))

    def joint(self, floor: int, sigma: float, candidates: np.ndarray) -> float:
        """The joint form (module docstring): the least over caps C >= ``floor`` of
        rounds·C + max(σ, the candidate below Θ(C)), Θ(C) the least candidate (or +inf)
        at which the count search holds at C; caps tried upwards while rounds·C + σ can
        still be below the least so far (+inf when the search holds at no cap: no main
        plan)."""
        rounds = self.shape.rounds
        thetas = [int(value) for value in candidates] + [math.inf]
        limits = [None] * len(thetas)

        def holds(cap: int, index: int) -> bool:
            if limits[index] is None:
                limits[index] = self._limits(thetas[index])
            return self._holds(cap, thetas[index], limits[index])

        least = math.inf
        for cap in (int(value) for value in self._caps(floor)):
            if rounds * cap + sigma >= least:
                break  # every later cap's term is at least this
            # the least index that holds (monotone in Θ); inf when not even Θ = +inf does:
            # no main plan has this τ_max
            index = least_passing(np.arange(len(thetas)),
                                  lambda at, cap=cap: holds(cap, at))
            if math.isinf(index):
                continue
            below = sigma if index == 0 else max(sigma, thetas[index - 1])
            least = min(least, rounds * cap + below)
        return least
