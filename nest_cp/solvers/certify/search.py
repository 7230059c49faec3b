"""Certify a DP plan against the full space: a proven interval [lower bound, best plan].

Why the bound is valid.  The certificate's lower end is min(incumbent, least
bound over the shapes still open, −inf if the placement-free pass was cut short).

1. Every plan (v = 1, plain data parallelism: :func:`unsupported` refuses the rest)
   belongs to exactly one shape (c, b, S, d, z) (:mod:`nest_cp.solvers.certify.split`;
   c the intra-layer configuration, context width included), so the least over shapes
   of a bound per shape bounds every plan.
2. Every shape gets the placement-free bound (:mod:`nest_cp.solvers.certify.bounds`),
   valid for all its plans; a shape whose bound reaches the incumbent holds no
   better plan and is dropped.
3. On a hierarchical network the plans of a visited shape split into *main*
   (every intra group on its innermost admitting tier) and *raised* (some group
   above it), :mod:`nest_cp.solvers.certify.geometry`.  The shape's bound is
   min(main bound, raised bound), where the main bound is the largest of the
   placement-free bound, the path bound (:mod:`nest_cp.solvers.certify.paths`) and
   the relaxation's proven value (:mod:`nest_cp.solvers.certify.relax`) — each valid
   for every main plan — and the raised bound, the larger of the bounds module's and
   the raised path bound (:mod:`nest_cp.solvers.certify.raised`), each valid for every
   raised plan.  A shape with no replica path has no main plan: main bound +inf.  On a
   graph, and for a shape with context width c > 1 (geometry), no such split is made:
   the placement-free bound alone.
4. The relaxation is solved with the cutoff "objective <= incumbent − 1", so its
   INFEASIBLE proves the shape's main plans cost at least the incumbent; its
   status counts only as the solver construction confirms it (DESIGN §4 v3).
5. The upper end is a plan priced by the evaluator (the hint, a layout-probe plan or a
   realised relaxation solution): never a solver's number.

How it runs.  The placement-free bound is computed for every shape (cheap), the open
shapes' path bounds are raised (:meth:`_Run.path_pass`), and the layout probe
(:mod:`nest_cp.solvers.certify.probe`, :meth:`_Run.probe_pass`) prices wider placement
classes at the incumbent's shape and the least-bound open shapes; then shapes below the
incumbent are visited in order of their bounds, each getting its
raised bound, its path bound (and the uniform plan that path suggests, placed and
priced), and then, unless that settled it, the relaxation within a per-shape
share of the time limit (a first pass with a short share, then the unresolved
ones share what is left).  Whenever a relaxation solution is below the incumbent
it is placed on the network (:mod:`nest_cp.solvers.certify.realise`) and the plan, priced
by the evaluator, becomes the incumbent if it is better.  The time limit bounds
the whole run; a shape never reached keeps its placement-free bound.

With a work limit the shares are work units instead of seconds (CP-SAT's deterministic
time, nest_cp.solvers.exact.budget.Work): each relaxation and placement run gets the
work its shape has left and is charged what it did, so which shapes are visited and how
far is the same on any machine at any load; the time limit is then a wall-clock cap,
and a certificate it cut short says so (``wall_capped`` and a note).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field

from nest_cp.cost.evaluate import Evaluator, evaluate
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.instance import CollectiveGroup, Instance, RecomputeMode, Strategy
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, Stage
from nest_cp.model.result import Status
from nest_cp.solvers.certify.bounds import FastBounds, ShapeBound
from nest_cp.solvers.certify.chain import LayerPrices, network_tiers
from nest_cp.solvers.certify.crowded import CrowdedBound
from nest_cp.solvers.certify.divided import DividedBound
from nest_cp.solvers.certify.geometry import geometry, replica_arcs
from nest_cp.solvers.certify.packed import PackedPathBound
from nest_cp.solvers.certify.paths import PathBound
from nest_cp.solvers.certify.probe import LayoutProbe
from nest_cp.solvers.certify.raised import RaisedPathBound
from nest_cp.solvers.certify.realise import realise
from nest_cp.solvers.certify.relax import Relaxation
from nest_cp.solvers.certify.shared import SharedSplitBound
from nest_cp.solvers.certify.shortrun import ShortRunBound
from nest_cp.solvers.certify.split import Catalogue, Shape, block_chain, shape_label, shapes
from nest_cp.solvers.certify.syncpath import SyncPathBound
from nest_cp.solvers.exact.budget import Work

logger = logging.getLogger(__name__)

FIRST_PASS_S = 20.0       # relaxation time per shape in the first pass (at most)
FIRST_PASS_SHARE = 0.05   # ... and at most this share of the whole limit
REALISE_S = 20.0          # time for placing one relaxation solution
FIRST_PASS_WORK = 20.0    # with a work limit: work units per shape in the first pass (at most)
REALISE_WORK = 20.0       # ... and per placement run
PROBE_SHAPES = 3          # open shapes the layout probe tries, least bound first
PROBE_LOOKS = 30          # ... among at most this many whose path bound it computes
AGNOSTIC_SHARE = 0.3      # of a shape's first visit, for the channel-agnostic relaxation
FINAL = ("optimal", "infeasible", "no model", "not needed")  # nothing more to learn


@dataclass(slots=True)
class ShapeOutcome:
    """What is proven about one shape that the placement-free bound did not prune."""

    label: str
    fast_bound: float
    sync_bound: float = 0
    path_tau: float = 0             # the path bound's τ (0: not computed)
    path_bound: float = -math.inf
    raised_bound: float | None = None  # None: not computed yet (it is at least fast_bound)
    relax_status: str = "not run"
    relax_bound: float = -math.inf
    relax_value: int | None = None
    realised_ticks: int | None = None
    wall_time_s: float = 0.0
    second_proof: str = "none"  # of the relaxation's status (RelaxOutcome.second_proof)
    # the channel-agnostic relaxation run first (Relaxation(channels=False)): its status,
    # "not run" until it has been
    agnostic_status: str = "not run"
    path_realised: bool = False  # the path bound's uniform plan has been placed (or tried)

    @property
    def main_bound(self) -> float:
        return max(self.fast_bound, self.path_bound, self.relax_bound)

    @property
    def bound(self) -> float:
        """min(main bound, raised bound): every plan of the shape is main or raised."""
        raised = self.fast_bound if self.raised_bound is None else self.raised_bound
        return min(self.main_bound, raised)

    @property
    def decided_by(self) -> str:
        """The bound that decides this shape: the strongest main bound (the cheapest on a tie),
        or ``raised`` when the plans with intra groups off their innermost tier weigh less."""
        raised = self.fast_bound if self.raised_bound is None else self.raised_bound
        if raised < self.main_bound:
            return "raised"
        if self.relax_bound > max(self.fast_bound, self.path_bound):
            return "relaxation"
        return "path" if self.path_bound > self.fast_bound else "placement-free"

    def as_dict(self) -> dict:
        return {"shape": self.label, "decided_by": self.decided_by,
                "fast_bound": _num(self.fast_bound),
                "path_bound": _num(self.path_bound),
                "raised_bound": None if self.raised_bound is None else _num(self.raised_bound),
                "relax_status": self.relax_status,
                "relax_bound": _num(self.relax_bound), "relax_value": self.relax_value,
                "realised_ticks": self.realised_ticks, "second_proof": self.second_proof,
                "agnostic_status": self.agnostic_status,
                "wall_time_s": round(self.wall_time_s, 3)}


def _num(value: float) -> int | None:
    return int(value) if math.isfinite(value) else None


@dataclass(slots=True)
class Certificate:
    """A proven interval [bound_ticks, objective_ticks] for the full space of one instance.

    Without a plan (status UNKNOWN) ``bound_ticks`` is still the proven lower bound when one
    is finite; INFEASIBLE has neither.
    """

    status: Status
    plan: Plan | None
    objective_ticks: int | None
    bound_ticks: int | None
    plan_source: str  # "hint" (the DP plan), "relaxation" (a realised plan), "layout probe"
    closed_by: str                   # which bound decided the lower end
    hint_ticks: int | None
    wall_time_s: float
    shapes_total: int = 0
    shapes_pruned_fast: int = 0
    shapes_visited: int = 0
    shapes_open: int = 0
    outcomes: list[ShapeOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    work_used: float | None = None  # work units spent (None: no work limit)
    wall_capped: bool = False  # the wall-clock cap, not the work limit, cut the run short

    @property
    def gap(self) -> float | None:
        """(best plan − bound) / bound: the interval's relative width."""
        if self.objective_ticks is None or not self.bound_ticks:
            return None
        return (self.objective_ticks - self.bound_ticks) / self.bound_ticks


def certify_full(instance: Instance, hint: Plan | None = None, time_limit_s: float = 600.0,
                 seed: int = 0, work_limit: float | None = None) -> Certificate:
    """Lower-bound the full space of ``instance`` and improve on ``hint`` where it can;
    with ``work_limit`` the shapes share work units, ``time_limit_s`` is a wall-clock cap
    (module docstring).

    Raises :class:`~nest_cp.model.errors.BackendOptionError` for an instance whose space the
    bounds do not cover (virtual stages > 1, SDP).
    """
    reason = unsupported(instance)
    if reason is not None:
        raise BackendOptionError(f"{instance.name}: cannot certify the full space: {reason}",
                                 option="training")
    start = time.monotonic()
    run = _Run(instance, hint, start + time_limit_s, seed, work_limit)
    run.fast_pass()
    run.path_pass()
    run.probe_pass()
    run.visit_all(min(FIRST_PASS_S, FIRST_PASS_SHARE * time_limit_s) if work_limit is None
                  else min(FIRST_PASS_WORK, FIRST_PASS_SHARE * work_limit))
    run.visit_all(None)
    return run.certificate(time.monotonic() - start)


class _Run:
    def __init__(self, instance: Instance, hint: Plan | None, deadline: float, seed: int,
                 work_limit: float | None = None):
        self.instance, self.deadline, self.seed = instance, deadline, seed
        self.work = Work(work_limit)
        self.network = NetworkModel(instance.cluster)
        self.tiers = network_tiers(self.network)
        self.prices: dict[int, LayerPrices] = {}
        self.fast: dict[int, FastBounds] = {}
        self.best_plan, self.best_ticks, self.source = None, None, "hint"
        self.hint_ticks = None
        if hint is not None:
            evaluation = evaluate(instance, hint, self.network)
            if evaluation.feasible:
                self.best_plan, self.best_ticks = hint, evaluation.objective_ticks
                self.hint_ticks = evaluation.objective_ticks
        self.bounds: list[ShapeBound] = []
        self.open: dict[str, tuple[Shape, ShapeOutcome]] = {}
        self.resolved: list[ShapeOutcome] = []
        self.total = 0
        self.paths: dict[str, PathBound] = {}  # the path pass's searches, by shape label
        self.unreached = math.inf  # least fast bound of shapes the fast pass never reached
        self.notes: list[str] = []

    def _remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _left(self) -> float:
        """What the run has left: work units under a work limit, else seconds.  Under a
        work limit the wall-clock cap passing counts as nothing left, and is recorded."""
        if not self.work.deterministic:
            return self._remaining()
        if self._remaining() <= 0:
            self.work.wall_capped = True
            return 0.0
        return self.work.left()

    def _mark(self) -> float:
        """A point to measure a visit's spending from (work used, or the clock)."""
        return self.work.used if self.work.deterministic else time.monotonic()

    def _spent(self, mark: float) -> float:
        return self._mark() - mark

    def _choice(self, shape: Shape) -> tuple[LayerPrices, FastBounds]:
        if shape.choice not in self.prices:
            prices = LayerPrices(self.instance, shape.config, shape.microbatch, self.tiers)
            self.prices[shape.choice] = prices
            self.fast[shape.choice] = FastBounds(self.instance, prices, block_chain(prices))
        return self.prices[shape.choice], self.fast[shape.choice]

    def fast_pass(self) -> None:
        """The placement-free bound of every shape."""
        for shape in shapes(self.instance):
            self.total += 1
            if self._remaining() <= 0:
                self.unreached = -math.inf  # nothing is known about the rest
                self.notes.append("time limit reached during the placement-free pass")
                self.work.wall_capped = self.work.deterministic
                break
            _, fast = self._choice(shape)
            self.bounds.append(fast.bound(shape))
        self.bounds.sort(key=lambda b: (b.total, b.shape.label))
        for bound in self.bounds:
            if math.isfinite(bound.total) and self._beats(bound.total):
                self.open[bound.shape.label] = (bound.shape, ShapeOutcome(
                    bound.shape.label, bound.total, bound.sync))

    def path_pass(self) -> None:
        """Raise the open shapes' bounds with their raised and (packed) path bounds before
        any work is spent, least bound first, until the least is one already raised.

        Both are proven bounds (:mod:`~nest_cp.solvers.certify.paths`,
        :mod:`~nest_cp.solvers.certify.packed`, :mod:`~nest_cp.solvers.certify.raised`)
        that charge no work units, so this changes no figure's dependence on the
        machine; it only stops a shape that the work limit never reaches from keeping its
        placement-free bound.  Taking the least bound first computes them only where they
        can move the certificate's lower end (the least bound over open shapes): when the
        least belongs to a shape already raised, every other is at least that.  The open
        shapes are then re-ordered by their bounds, and those that reach the incumbent are
        dropped.  (Path solutions are still realised when the shapes are visited.)  Only
        the wall-clock cap can cut it short; a shape it does not reach keeps its
        placement-free bound, which is still valid.
        """
        raised = set()
        while True:
            if self._remaining() <= 0:
                self.work.wall_capped = self.work.deterministic
                self.notes.append("wall-clock cap reached during the path pass")
                break
            least = min(((outcome.bound, label) for label, (_, outcome) in self.open.items()
                         if self._beats(outcome.bound)), default=None)
            if least is None or least[1] in raised:
                break
            label = least[1]
            raised.add(label)
            shape, outcome = self.open[label]
            prices, fast = self._choice(shape)
            geo = geometry(prices)
            if geo is not None:
                self._path_pass_one(shape, outcome, fast, geo)
        self._reorder()

    def _reorder(self) -> None:
        """Order the open shapes by their bounds; drop those that reach the incumbent."""
        ordered = sorted(self.open.items(), key=lambda item: (item[1][1].bound, item[0]))
        self.open = dict(ordered)
        for label, (_, outcome) in ordered:
            if not self._beats(outcome.bound):
                self._resolve(label)

    def _path_bounds(self, shape: Shape, outcome: ShapeOutcome, fast: FastBounds, geo,
                     arcs) -> PathBound | None:
        """Fill in the shape's raised bound and path bound where not yet computed; the
        path bound's search (None when it was computed before or there is no block chain)."""
        crowded = divided = None
        if outcome.raised_bound is None:
            outcome.raised_bound = fast.raised(shape, geo.k_min)
            if fast.chain is not None and self._beats(outcome.raised_bound):
                # both bound every raised plan (module docstring of raised): keep the larger
                outcome.raised_bound = max(outcome.raised_bound, shape.rounds * RaisedPathBound(
                    shape, geo, fast, arcs).tau + outcome.sync_bound)
                if self._beats(outcome.raised_bound):
                    # every raised plan has τ_max >= (raised bound − σ_lb) / rounds: the
                    # crowded-node and divided-channel bounds with that τ_lb (module
                    # docstrings of crowded and divided)
                    crowded = CrowdedBound(shape, geo, fast)
                    divided = DividedBound(shape, geo, fast)
                    tau_lb = (outcome.raised_bound - outcome.sync_bound) // shape.rounds
                    outcome.raised_bound = max(outcome.raised_bound, crowded.bound(tau_lb),
                                               divided.bound(tau_lb))
        if fast.chain is None or outcome.path_bound != -math.inf:
            return None
        path = PathBound(shape, geo, fast, arcs)
        # the packed path bound (module docstring of packed) is at least the path bound and
        # bounds the same main plans' τ_max
        outcome.path_tau = PackedPathBound(path).tau
        if self._beats(shape.rounds * outcome.path_tau + outcome.sync_bound) and \
                math.isfinite(outcome.path_tau):
            # the shared-split bound (module docstring of shared) is at least the packed one
            # and bounds the same main plans' τ_max: the replicas share their block counts
            outcome.path_tau = SharedSplitBound(path, outcome.path_tau).tau
        outcome.path_bound = shape.rounds * outcome.path_tau + outcome.sync_bound
        if self._beats(outcome.path_bound) and math.isfinite(outcome.path_tau):
            # every main plan has τ_max >= path_tau: the crowded-node and divided-channel
            # bounds with it
            crowded = crowded or CrowdedBound(shape, geo, fast)
            divided = divided or DividedBound(shape, geo, fast)
            outcome.path_bound = max(outcome.path_bound, crowded.bound(outcome.path_tau),
                                     divided.bound(outcome.path_tau))
        if self._beats(outcome.path_bound) and math.isfinite(outcome.path_tau):
            # a stage whose dense sync stays in a domain it nearly fills sends its transfers
            # out of it (module docstring of syncpath)
            synced = SyncPathBound(shape, geo, fast, arcs)
            outcome.path_bound = max(outcome.path_bound,
                                     synced.bound(outcome.path_tau, outcome.sync_bound))
        if self._beats(outcome.path_bound) and math.isfinite(outcome.path_tau):
            # a stage whose sync needs several ring channels has a replica with a short run
            # of stages in its node, whose ends leave the node (module docstring of shortrun)
            short = ShortRunBound(shape, geo, fast)
            outcome.path_bound = max(outcome.path_bound,
                                     short.bound(outcome.path_tau, outcome.sync_bound))
        return path

    def _path_pass_one(self, shape: Shape, outcome: ShapeOutcome, fast: FastBounds, geo
                       ) -> None:
        path = self._path_bounds(shape, outcome, fast, geo, replica_arcs(shape.num_stages, geo))
        if path is not None and self._beats(outcome.bound):
            self.paths[outcome.label] = path  # its solution is realised at the visit

    def probe_pass(self) -> None:
        """The layout probe (:mod:`~nest_cp.solvers.certify.probe`) at the incumbent's shape
        with its split, then at the first :data:`PROBE_SHAPES` open shapes below the
        incumbent (least bound first, each shape's path bound computed before its bound
        counts, as in :meth:`path_pass`; at most :data:`PROBE_LOOKS` computed) with the
        split of their path bound's solution; the
        cheapest plan it prices below the incumbent becomes the incumbent.  The open shapes
        are then re-ordered by their bounds (their path bounds may have been computed here)
        and those that reach the incumbent are dropped.

        Each candidate is a full-space plan priced by the evaluator, so the incumbent stays a
        valid upper end.  The shapes, splits and layouts are fixed by the instance and the
        bounds already proven (no clock, no work units), so the probe is deterministic;
        only the wall-clock cap can cut it short, and that is recorded.
        """
        probe = LayoutProbe(Evaluator(self.instance, self.network))
        splits = []
        if self.best_plan is not None and probe.applies(self.best_plan):
            incumbent = self.best_plan
            label = shape_label(incumbent.config, incumbent.microbatch,
                                incumbent.num_stages, incumbent.num_replicas, incumbent.zero)
            if label in self.open and self._beats(self.open[label][1].bound):
                splits.append((label, self.best_plan))
        looked: set[str] = set()   # shapes whose path bound is in
        probed: set[str] = set()
        while len(probed) < PROBE_SHAPES and len(looked) < PROBE_LOOKS:
            least = min(((outcome.bound, label) for label, (_, outcome) in self.open.items()
                         if label not in probed), default=None)
            if least is None or not self._beats(least[0]):
                break
            label = least[1]
            shape, outcome = self.open[label]
            if label not in looked:  # raise its bound first: it may no longer be the least
                looked.add(label)
                self._path_of(shape, outcome)
                continue
            probed.add(label)
            split = self._path_split(shape, outcome)
            if split is not None:
                splits.append((label, split))
        for label, split in splits:
            if self._remaining() <= 0:
                self.work.wall_capped = self.work.deterministic
                self.notes.append("wall-clock cap reached during the layout probe")
                break
            if not self._beats(self.open[label][1].bound):
                continue
            found = probe.best(split, self.best_ticks)
            logger.info("%s: layout probe priced %d placements, best %s (%s)", label,
                        found.priced, found.ticks, found.layout)
            if found.plan is not None:
                plan, ticks = self._tidy(found.plan, found.ticks)
                self.best_plan, self.best_ticks, self.source = plan, ticks, "layout probe"
                self.notes.append(f"layout probe: {label}, {found.layout}: {ticks} ticks")
        self._reorder()

    def _path_of(self, shape: Shape, outcome: ShapeOutcome) -> PathBound | None:
        """The shape's path bound search (None without a block chain or geometry), its
        raised and path bounds filled in where not yet computed (:meth:`_path_bounds`)."""
        prices, fast = self._choice(shape)
        geo = geometry(prices)
        if geo is None or fast.chain is None:
            return None
        arcs = replica_arcs(shape.num_stages, geo)
        path = self._path_bounds(shape, outcome, fast, geo, arcs) or \
            self.paths.get(outcome.label) or PathBound(shape, geo, fast, arcs)
        self.paths[outcome.label] = path  # its solution is realised at the visit
        return path

    def _path_split(self, shape: Shape, outcome: ShapeOutcome) -> Plan | None:
        """The shape's stages and recomputation from its path bound's solution (None when
        there is none), without a placement."""
        path = self._path_of(shape, outcome)
        if path is None:
            return None
        prices, fast = self._choice(shape)
        geo = geometry(prices)
        catalogue = Catalogue(self.instance, prices, shape, fast.chain)
        solution = path.solution(catalogue, self._cheapest_sync(prices, shape, geo))
        if solution is None:
            return None
        stages = tuple(Stage(span.first, span.last, span.mode)
                       for span in catalogue.spans_of(solution["options"]))
        return Plan(shape.config, shape.microbatch, shape.zero, shape.dp, stages)

    def _beats(self, bound: float) -> bool:
        """Whether a shape with this bound may still hold a plan better than the incumbent."""
        return self.best_ticks is None or bound < self.best_ticks

    def visit_all(self, share_s: float | None) -> None:
        """Visit the open shapes in bound order; ``share_s`` caps each (None: share the rest),
        in seconds, or in work units under a work limit."""
        for label in list(self.open):
            shape, outcome = self.open[label]
            if not self._beats(outcome.bound):
                self._resolve(label)
                continue
            if outcome.relax_status in FINAL:
                continue
            left = self._left()
            if left <= 0:
                break
            remaining_open = sum(1 for _, o in self.open.values()
                                 if o.relax_status not in FINAL)
            budget = min(share_s, left) if share_s is not None else left / max(1, remaining_open)
            self._visit(shape, outcome, budget)
            if not self._beats(outcome.bound):
                self._resolve(label)

    def _resolve(self, label: str) -> None:
        self.resolved.append(self.open.pop(label)[1])

    def _visit(self, shape: Shape, outcome: ShapeOutcome, budget_s: float) -> None:
        """One shape's bounds and relaxations within ``budget_s`` (seconds, or work units
        under a work limit: :meth:`_mark`)."""
        began = time.monotonic()
        mark = self._mark()
        prices, fast = self._choice(shape)
        geo = geometry(prices)
        if geo is None:
            outcome.relax_status = "no model"  # a graph, or c > 1: the placement-free bound
            outcome.raised_bound = outcome.fast_bound
            return
        arcs = replica_arcs(shape.num_stages, geo)
        path = self._path_bounds(shape, outcome, fast, geo, arcs)
        if fast.chain is not None and not outcome.path_realised:
            outcome.path_realised = True
            if path is None:  # computed in the path pass
                path = self.paths.pop(outcome.label, None) or PathBound(shape, geo, fast, arcs)
            if self._beats(outcome.bound):
                catalogue = Catalogue(self.instance, prices, shape, fast.chain)
                solution = path.solution(catalogue, self._cheapest_sync(prices, shape, geo))
                if solution is not None:
                    self._realise(catalogue, geo, solution, outcome)
        if not self._beats(outcome.bound) or self._closed(outcome):
            outcome.relax_status = "not needed"
            return
        catalogue = Catalogue(self.instance, prices, shape, fast.chain)
        tau_floor = outcome.path_tau
        floor = (int(tau_floor), int(outcome.sync_bound)) \
            if math.isfinite(tau_floor) and math.isfinite(outcome.sync_bound) else None
        if outcome.agnostic_status == "not run":
            # the channel-agnostic model first (fast): its bound and a plan to realise; then
            # the channel-counting one (module docstring of relax, step 3a) in what is left
            share = AGNOSTIC_SHARE * (budget_s - self._spent(mark))
            result = self._relax(catalogue, geo, arcs, False, share, floor, outcome)
            outcome.agnostic_status = result.status
            if not self._beats(outcome.bound) or self._closed(outcome) or \
                    result.status == "infeasible":
                outcome.relax_status = result.status if result.status == "infeasible" \
                    else "not needed"
                outcome.second_proof = result.second_proof
                outcome.wall_time_s += time.monotonic() - began
                return
        result = self._relax(catalogue, geo, arcs, True, budget_s - self._spent(mark), floor,
                             outcome)
        outcome.relax_status = result.status
        outcome.second_proof = result.second_proof
        outcome.relax_value = result.objective
        outcome.wall_time_s += time.monotonic() - began

    def _relax(self, catalogue: Catalogue, geo, arcs, channels: bool, budget_s: float,
               floor, outcome: ShapeOutcome):
        """Solve one relaxation model (both are relaxations of the shape's main plans), raise
        the shape's relaxation bound to its proven value, and realise its solution when it
        is below the incumbent."""
        began, mark = time.monotonic(), self._mark()
        relaxation = Relaxation(catalogue, geo, arcs, channels=channels)
        if self.work.deterministic:  # the work left; the clock only as the cap
            result = relaxation.solve(max(0.05, self._remaining()), cutoff=self.best_ticks,
                                      seed=self.seed, floor=floor,
                                      work_limit=max(0.001, budget_s - self._spent(mark)))
            self.work.charge(result.work)
            self.work.wall_capped = self.work.wall_capped or result.wall_capped
        else:
            result = relaxation.solve(max(0.05, budget_s - (time.monotonic() - began)),
                                      cutoff=self.best_ticks, seed=self.seed, floor=floor)
        outcome.relax_bound = max(outcome.relax_bound, result.bound)
        logger.info("%s: relaxation (channels %s) %s bound %s value %s (%.1f s)",
                    outcome.label, channels, result.status, result.bound, result.objective,
                    time.monotonic() - began)
        if result.solution and result.objective is not None and self._beats(result.objective):
            self._realise(catalogue, geo, result.solution, outcome)
        return result

    def _closed(self, outcome: ShapeOutcome) -> bool:
        """Whether the shape's best plan found is proven optimal for it."""
        return outcome.realised_ticks is not None and outcome.realised_ticks <= outcome.bound

    @staticmethod
    def _cheapest_sync(prices: LayerPrices, shape: Shape, geo):
        """The tier a path solution gives each stage's sync term: the cheapest one that
        admits the group and whose domains hold the merged runs of all replicas."""
        def pick(stage: int, name: str, option, runs: tuple[int, ...]) -> int | None:
            dp, zero, ep = shape.dp, shape.zero, shape.config.ep
            widen = None
            if name == "dense" and dp * ep > 1:
                group, price = dp * ep, lambda k: prices.dense_sync(option.span, dp, zero, k)
                widen = CollectiveGroup.EP
            elif name == "expert" and dp > 1:
                group, price = dp, lambda k: prices.expert_sync(option.span, dp, zero, k)
            elif name == "g" and zero == 3 and dp > 1:
                group, price = dp, lambda k: prices.zero_gather(option.span, dp, zero, k)
            else:
                return None
            tiers = [t.index for t in prices.tiers if t.admits(group) and (
                t.index >= geo.levels or
                dp * runs[t.index] * geo.merged(t.index, widen) <= geo.capacity(t.index))]
            return min(tiers, key=lambda k: (price(k), -k))
        return pick

    def _realise(self, catalogue: Catalogue, geo, solution: dict,
                 outcome: ShapeOutcome) -> None:
        if self.work.deterministic:
            plan = realise(catalogue, geo, solution, max(1.0, self._remaining()), self.seed,
                           self.work, min(REALISE_WORK, max(1.0, self.work.left())))
        else:
            plan = realise(catalogue, geo, solution,
                           min(REALISE_S, max(1.0, self._remaining())), self.seed)
        if plan is None:
            logger.info("%s: the relaxation solution could not be placed", outcome.label)
            return
        evaluation = evaluate(self.instance, plan, self.network)
        if not evaluation.feasible:
            self.notes.append(f"{outcome.label}: realised plan infeasible: "
                              f"{evaluation.violations[0]}")
            return
        plan, ticks = self._tidy(plan, evaluation.objective_ticks)
        outcome.realised_ticks = ticks
        if self._beats(ticks):
            self.best_plan, self.best_ticks = plan, ticks
            self.source = "relaxation"
            logger.info("incumbent %d ticks from %s", self.best_ticks, outcome.label)

    def _tidy(self, plan: Plan, ticks: int) -> tuple[Plan, int]:
        """Drop recomputation a stage does not need (the relaxation is indifferent between
        tied modes): keep each change the evaluator prices no slower and still fitting."""
        for index, stage in enumerate(plan.stages):
            if stage.recompute is RecomputeMode.NONE or \
                    RecomputeMode.NONE not in self.instance.training.recompute_modes:
                continue
            stages = list(plan.stages)
            stages[index] = dataclasses.replace(stage, recompute=RecomputeMode.NONE)
            candidate = dataclasses.replace(plan, stages=tuple(stages))
            evaluation = evaluate(self.instance, candidate, self.network)
            if evaluation.feasible and evaluation.objective_ticks <= ticks:
                plan, ticks = candidate, evaluation.objective_ticks
        return plan, ticks

    def certificate(self, wall_time_s: float) -> Certificate:
        certificate = self._certificate(wall_time_s)
        if self.work.deterministic:
            certificate.work_used = round(self.work.used, 6)
            certificate.wall_capped = self.work.wall_capped
            if self.work.wall_capped:
                certificate.notes.append("the wall-clock cap, not the work limit, cut the run "
                                         "short: this interval depends on the machine")
        return certificate

    def _certificate(self, wall_time_s: float) -> Certificate:
        open_outcomes = [o for _, o in self.open.values() if self._beats(o.bound)]
        bounds = [o.bound for o in open_outcomes] + [self.unreached]
        least = min(bounds)
        pruned_fast = sum(1 for b in self.bounds if not self._beats(b.total))
        visited = len([o for o in self.resolved + [o for _, o in self.open.values()]
                       if o.relax_status != "not run"])
        if self.best_ticks is None:
            status = Status.INFEASIBLE if not open_outcomes and least == math.inf \
                else Status.UNKNOWN
            # no plan found, but every plan of the space still costs at least ``least``
            known = int(least) if status is Status.UNKNOWN and math.isfinite(least) else None
            return Certificate(status, None, None, known, "none", "no plan", None, wall_time_s,
                               self.total, pruned_fast, visited, len(open_outcomes),
                               self._outcomes(), self.notes)
        bound = min(self.best_ticks, least)
        status = Status.OPTIMAL if bound >= self.best_ticks else Status.FEASIBLE
        closed_by = self._closed_by(status, open_outcomes)
        return Certificate(status, self.best_plan, self.best_ticks,
                           int(bound) if math.isfinite(bound) else None, self.source,
                           closed_by, self.hint_ticks, wall_time_s, self.total, pruned_fast,
                           visited, len(open_outcomes), self._outcomes(), self.notes)

    def _closed_by(self, status: Status, open_outcomes: list[ShapeOutcome]) -> str:
        """The strongest bound a shape needed ("relaxation" > "path" > "placement-free"), or
        for an open interval the weakest shape and its bound."""
        if status is not Status.OPTIMAL:
            weakest = min(open_outcomes, key=lambda o: o.bound, default=None)
            if weakest is None:
                return "open: shapes never reached"
            return f"open: {weakest.label} ({weakest.decided_by} bound)"
        used = {outcome.decided_by for outcome in self.resolved}
        for method in ("relaxation", "raised", "path"):
            if method in used:
                return method
        return "placement-free"

    def _outcomes(self) -> list[ShapeOutcome]:
        return sorted(self.resolved + [o for _, o in self.open.values()],
                      key=lambda o: (o.bound, o.label))


def unsupported(instance: Instance) -> str | None:
    """Why the bounds do not cover this instance's full space, or None when they do.

    Interleaved 1F1B (v > 1) prices chunks, not stages, and subnetwork data parallelism
    (DESIGN §7) prices masked replicas; nothing here bounds either.  Context parallelism
    (c > 1) is covered: its shapes get the placement-free bound with the context exchange
    at its least price over the tiers a ring pair or CP group could span and the syncs over
    d·e·c and d·c ranks (bounds module docstring), and no stronger one (geometry).
    Overlapped gradient reduction and weight gathers are covered (each exposed phase
    of the sync is bounded below by the phase minus the stage's backward, resp.
    forward, ticks, and by 0), and so is tensor-parallel communication overlap (TP
    collectives on tier 0 priced as exposed, docs/cost-model.md §5 e: chain's "TP
    overlap" lemma).
    """
    if instance.training.virtual_stages != (1,):
        return (f"virtual stages {list(instance.training.virtual_stages)} allowed; only "
                f"plain 1F1B (v = 1) is bounded")
    if instance.training.strategies != (Strategy.DP,):
        return (f"replication strategies {[s.value for s in instance.training.strategies]} "
                f"allowed; only plain data parallelism is bounded (subnetwork data "
                f"parallelism, SDP, is not)")
    return None
