"""``mcmc``: a FlexFlow-style Metropolis random walk over the full plan space.

FlexFlow (Jia et al., SysML'19, "Beyond data and model parallelism for deep
neural networks", §5) searches parallelisation strategies by Markov chain
Monte Carlo: propose a random local change, simulate it, accept it with the
Metropolis rule.  Here a state is every choice of DESIGN §2 and §3.2 —
configuration (t, e and the context width c: FlexFlow's SOAP space partitions a
sample's *attribute* dimensions, the sequence among them, §4, so splitting the
sequence over c ranks is a FlexFlow strategy; the widths are the instance's
``training.context_parallel``), microbatch b, ZeRO stage z, data parallelism d, virtual stages v,
the boundaries of the S·v chunks, one recompute mode per stage — plus a
permutation of all device ids; rank (stage, replica, j) runs on the device at
its Megatron-layout position of that permutation (t, c, e, replica, stage from
innermost: ``plan.contiguous_placement``), so every injective placement
is reachable.  Overlapped gradient reduction is a fact of the instance.

Moves (weight in brackets, drawn with ``random.Random``): another
(configuration, b) pair [1]; another b for the same configuration [1];
another ZeRO stage [1]; another d [2]; another pipeline depth [2] (with v = 1:
split one stage in two or merge two neighbours; with v > 1: one stage more or
fewer, chunks re-split evenly); shift one chunk boundary by a layer [3];
another allowed v, chunks re-split evenly [1]; another allowed recompute mode
for one stage [1]; swap a used device with any device [4].  A move that would
need more devices than the cluster has first shrinks d; if even d = 1 does not
fit, or the evaluator rejects the plan's shape (v > 1 needs S >= 2 and m a
multiple of S, DESIGN §3.2 b), the move is void.

Energy: the evaluator's objective T (ticks) for a plan that fits; a plan over
HBM gets T·(2 + worst overflow / usable HBM), so it is always worse than any
fitting plan of the same T but still guides the walk back into memory.
Acceptance: always if the energy does not increase, else with probability
exp(−(E' − E) / (θ·E)), a relative temperature θ cooled geometrically from
θ₀ = 0.05 to θ₁ = 0.0005 over each chain's steps (simulated annealing).

Budget: ``extra["budget"]`` proposals in total (default 2000), spread evenly
over ``extra["chains"]`` chains (default 4); chain 0 starts from the
``manual`` plan when one exists, the others from random structured states on
the canonical device order.  Results are deterministic for a given seed and
budget (one ``random.Random`` per chain, seeded from ``options.seed``), unless
``options.time_limit_s`` stops the walk first (reported in ``stats``).
The best fitting plan of all chains is returned as FEASIBLE without a bound.

Under a launcher (``training.launcher``) the walk stays among the plans it starts: the
evaluator refuses any other shape, so such a proposal is a void move; a random start is
drawn again (up to ``START_DRAWS`` times, else the chain is skipped) until the launcher
accepts it; and the recompute move changes every stage's mode at once (a launcher's
setting is global).
Every proposal is priced by the plan evaluator itself: the walk keeps one
:class:`nest_cp.cost.evaluate.Evaluator`, whose memoised terms make a proposal that
changes one choice cost little more than the terms it changes.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, replace

from nest_cp.cost.evaluate import Evaluator
from nest_cp.model.errors import BackendOptionError, InvalidPlan
from nest_cp.model.instance import Instance, IntraConfig, RecomputeMode
from nest_cp.model.launchers.search import one_recompute_mode
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, Stage, contiguous_placement
from nest_cp.model.progress import Progress, ticks_text
from nest_cp.model.result import SolveOptions, SolveResult, Space, Status
from nest_cp.solvers.baselines._common import empty_result, feasible_result, uniform_split
from nest_cp.solvers.baselines.manual import solve_manual

logger = logging.getLogger(__name__)

DEFAULT_BUDGET = 2000
DEFAULT_CHAINS = 4
START_TEMPERATURE = 0.05
END_TEMPERATURE = 0.0005
START_DRAWS = 100  # random starts drawn per chain before it is skipped (under a launcher)
MOVE_WEIGHTS = {"choice": 1, "microbatch": 1, "zero": 1, "dp": 2, "stages": 2, "boundary": 3,
                "virtual": 1, "recompute": 1, "placement": 4}


@dataclass(frozen=True, slots=True)
class _State:
    """One point of the walk; ``boundaries[k]`` is the last layer of chunk k (S·v chunks)."""

    config: IntraConfig
    microbatch: int
    zero: int
    dp: int
    virtual: int  # v; chunk k runs on stage k mod S
    boundaries: tuple[int, ...]
    recompute: tuple[RecomputeMode, ...]  # one mode per pipeline stage
    device_order: tuple[int, ...]  # a permutation of every device id

    @property
    def num_stages(self) -> int:
        return len(self.boundaries) // self.virtual

    @property
    def devices_used(self) -> int:
        return self.config.devices * self.num_stages * self.dp

    def stages(self) -> tuple[Stage, ...]:
        firsts = (0, *(last + 1 for last in self.boundaries[:-1]))
        return tuple(Stage(first, last, self.recompute[chunk % self.num_stages])
                     for chunk, (first, last) in enumerate(zip(firsts, self.boundaries)))

    def plan(self) -> Plan:
        placement = contiguous_placement(self.config, self.num_stages, self.dp,
                                         self.device_order)
        return Plan(self.config, self.microbatch, self.zero, self.dp, self.stages(), placement,
                    self.virtual)

    def key(self) -> tuple:
        """Identifies the plan: unused devices at the end of the order do not matter."""
        return (self.config, self.microbatch, self.zero, self.dp, self.virtual, self.boundaries,
                self.recompute, self.device_order[:self.devices_used])


@dataclass(frozen=True, slots=True)
class _Scored:
    energy: float
    objective_ticks: int
    fits: bool


def solve_mcmc(instance: Instance, options: SolveOptions) -> SolveResult:
    """Best fitting plan of several annealed Metropolis chains (module docstring)."""
    started = time.perf_counter()
    budget = int(options.extra.get("budget", DEFAULT_BUDGET))
    chains = int(options.extra.get("chains", DEFAULT_CHAINS))
    if budget < 1 or chains < 1:
        raise BackendOptionError(f"expected budget >= 1 and chains >= 1, got {budget} and {chains}")
    referee = Evaluator(instance)
    walk = _Walk(referee, deadline=started + options.time_limit_s)
    master = random.Random(options.seed)
    chain_seeds = [master.getrandbits(64) for _ in range(chains)]
    manual = solve_manual(instance, options).plan
    with Progress("mcmc", budget, show_bar=options.progress, logger=logger) as progress:
        for chain, seed in enumerate(chain_seeds):
            rng = random.Random(seed)
            start = _state_from_plan(manual, referee.network) if chain == 0 and manual else \
                _admitted_start(walk, rng)
            steps = budget // chains + (1 if chain < budget % chains else 0)
            if start is None:
                walk.skipped_chains += 1
                continue
            walk.run_chain(start, steps, rng, progress)
    stats = walk.stats()
    if walk.best is None:
        refused = "" if not walk.skipped_chains else (
            f"; {walk.skipped_chains} chain(s) found no start the launcher "
            f"({instance.training.launcher.value}) accepts in {START_DRAWS} draws")
        return empty_result("mcmc", Status.UNKNOWN, started,
                            f"no fitting plan among {stats['proposals']} proposals{refused}",
                            stats, space=Space.FULL)
    return feasible_result("mcmc", referee, walk.best.plan(), started, stats=stats,
                           space=Space.FULL)


class _Walk:
    """The chains' evaluator, scores and best plan; one Metropolis chain per run_chain."""

    def __init__(self, referee: Evaluator, deadline: float):
        self.referee, self.instance, self.deadline = referee, referee.instance, deadline
        self.limit = self.instance.cluster.usable_hbm_bytes
        self.cache: dict[tuple, _Scored | None] = {}
        self.best: _State | None = None
        self.best_ticks: int | None = None
        self.proposals = self.accepted = 0
        self.chain_best: list[int | None] = []
        self.stopped_by_time = False
        self.skipped_chains = 0

    def run_chain(self, state: _State, steps: int, rng: random.Random,
                  progress: Progress) -> None:
        scored = self.score(state)
        if scored is None:
            raise InvalidPlan("mcmc: the evaluator rejects the start state's shape")
        chain_best = scored.objective_ticks if scored.fits else None
        for step in range(steps):
            if time.perf_counter() > self.deadline:
                self.stopped_by_time = True
                break
            progress.advance(status=f"best {ticks_text(self.best_ticks)} ticks")
            temperature = START_TEMPERATURE * (END_TEMPERATURE / START_TEMPERATURE) ** (
                step / max(1, steps - 1))
            proposal = _propose(self.instance, state, rng)
            self.proposals += 1
            candidate = None if proposal is None else self.score(proposal)
            if candidate is None:  # a void move
                continue
            if candidate.fits and (chain_best is None or candidate.objective_ticks < chain_best):
                chain_best = candidate.objective_ticks
            if _accept(scored.energy, candidate.energy, temperature, rng):
                state, scored = proposal, candidate
                self.accepted += 1
        self.chain_best.append(chain_best)

    def score(self, state: _State) -> _Scored | None:
        """The state's energy by the evaluator; None if the evaluator rejects its shape."""
        key = state.key()
        if key not in self.cache:
            self.cache[key] = self._evaluate(state)
        scored = self.cache[key]
        if scored is not None and scored.fits and (
                self.best_ticks is None or scored.objective_ticks < self.best_ticks):
            self.best, self.best_ticks = state, scored.objective_ticks
        return scored

    def _evaluate(self, state: _State) -> _Scored | None:
        evaluation = self.referee.evaluate(state.plan())
        ticks = evaluation.objective_ticks
        if ticks is None:
            return None
        if evaluation.feasible:
            return _Scored(float(ticks), ticks, True)
        overflow = max(stage.memory_bytes - stage.memory_limit_bytes
                       for stage in evaluation.stages)
        return _Scored(ticks * (2 + overflow / self.limit), ticks, False)

    def stats(self) -> dict:
        return {"proposals": self.proposals, "evaluations": len(self.cache),
                "accepted": self.accepted, "chain_best_ticks": list(self.chain_best),
                "stopped_by_time": self.stopped_by_time, "skipped_chains": self.skipped_chains}


def _admitted_start(walk: _Walk, rng: random.Random) -> _State | None:
    """A random start whose shape the evaluator accepts (under a launcher: one the launcher
    starts), drawn up to ``START_DRAWS`` times; None if none was."""
    for _ in range(START_DRAWS):
        state = _random_state(walk.instance, walk.referee.network, rng)
        if walk.score(state) is not None:
            return state
    return None


def _accept(energy: float, new_energy: float, temperature: float, rng: random.Random) -> bool:
    """Metropolis rule on the relative energy change."""
    if new_energy <= energy:
        return True
    return rng.random() < math.exp(-(new_energy - energy) / (temperature * energy))


# ------------------------------------------------------------------ states and moves


def _random_state(instance: Instance, network: NetworkModel, rng: random.Random) -> _State:
    """A random structured start (v = 1): any choice, depth and d that fit the device count,
    every stage in the most memory-saving allowed recompute mode."""
    devices = instance.cluster.num_devices
    choices = [(c, b) for c, b in instance.choices if c.devices <= devices]
    if not choices:
        raise BackendOptionError(f"expected a configuration of at most {devices} devices")
    config, microbatch = rng.choice(choices)
    num_stages = rng.randint(1, min(instance.workload.num_layers, devices // config.devices))
    dp = rng.randint(1, devices // (config.devices * num_stages))
    stages = uniform_split(instance.workload.num_layers, num_stages)
    saving = max(instance.training.recompute_modes, key=_SAVING.index)
    return _State(config, microbatch, rng.choice(instance.training.zero_stages), dp, 1,
                  tuple(stage.last_layer for stage in stages), (saving,) * num_stages,
                  network.canonical_order())


# recompute modes from the least to the most activation memory saved
_SAVING = (RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL)


def _state_from_plan(plan: Plan, network: NetworkModel) -> _State:
    """The state whose device order reproduces ``plan``'s placement; unused devices follow."""
    order: dict[int, int] = {}
    for stage, replicas in enumerate(plan.placement):
        for replica, ranks in enumerate(replicas):
            for rank, device in enumerate(ranks):
                # contiguous_placement's position: j + a·(r + d·s)
                order[rank + plan.config.devices * (replica + plan.num_replicas * stage)] = \
                    device
    used = [order[position] for position in range(len(order))]
    rest = [device for device in network.canonical_order() if device not in set(used)]
    return _State(plan.config, plan.microbatch, plan.zero, plan.num_replicas,
                  plan.virtual_stages, tuple(chunk.last_layer for chunk in plan.stages),
                  tuple(plan.stage_recompute(stage) for stage in range(plan.num_stages)),
                  tuple(used + rest))


def _propose(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    """One random local change, or None when the drawn move does not apply."""
    move = rng.choices(list(MOVE_WEIGHTS), weights=list(MOVE_WEIGHTS.values()))[0]
    return _MOVES[move](instance, state, rng)


def _fit_devices(instance: Instance, state: _State) -> _State | None:
    """Shrink d until the plan fits the device count; None if even d = 1 does not."""
    per_replica = state.config.devices * state.num_stages
    most = instance.cluster.num_devices // per_replica
    if most < 1:
        return None
    return replace(state, dp=min(state.dp, most))


def _resplit(instance: Instance, state: _State, num_stages: int, virtual: int) -> _State | None:
    """``state`` with S·v evenly split chunks; stage modes kept (new stages copy the last)."""
    if num_stages * virtual > instance.workload.num_layers:
        return None
    chunks = uniform_split(instance.workload.num_layers, num_stages, virtual)
    modes = (state.recompute + (state.recompute[-1],) * num_stages)[:num_stages]
    return _fit_devices(instance, replace(state, virtual=virtual, recompute=modes,
                                          boundaries=tuple(c.last_layer for c in chunks)))


def _move_choice(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    others = [(c, b) for c, b in instance.choices if (c, b) != (state.config, state.microbatch)]
    if not others:
        return None
    config, microbatch = rng.choice(others)
    return _fit_devices(instance, replace(state, config=config, microbatch=microbatch))


def _move_microbatch(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    sizes = [b for c, b in instance.choices if c == state.config and b != state.microbatch]
    return replace(state, microbatch=rng.choice(sizes)) if sizes else None


def _move_zero(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    stages = [z for z in instance.training.zero_stages if z != state.zero]
    return replace(state, zero=rng.choice(stages)) if stages else None


def _move_dp(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    most = instance.cluster.num_devices // (state.config.devices * state.num_stages)
    options = [d for d in range(1, most + 1) if d != state.dp]
    return replace(state, dp=rng.choice(options)) if options else None


def _move_stages(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    """v = 1: split a stage of two or more layers at a random cut, or merge two neighbours
    (the merged stage recomputes in the more saving of their modes).  v > 1: one stage more
    or fewer, the chunks split evenly again."""
    if state.virtual > 1:
        num_stages = state.num_stages + rng.choice((-1, 1))
        return _resplit(instance, state, num_stages, state.virtual) if num_stages >= 2 else None
    bounds, modes = list(state.boundaries), list(state.recompute)
    firsts = [0, *(last + 1 for last in bounds[:-1])]
    if rng.random() < 0.5:
        splittable = [s for s in range(len(bounds)) if bounds[s] > firsts[s]]
        if not splittable:
            return None
        stage = rng.choice(splittable)
        bounds.insert(stage, rng.randint(firsts[stage], bounds[stage] - 1))
        modes.insert(stage, modes[stage])
    else:
        if len(bounds) < 2:
            return None
        stage = rng.randrange(len(bounds) - 1)
        del bounds[stage]
        modes[stage + 1] = max(modes[stage], modes[stage + 1], key=_SAVING.index)
        del modes[stage]
    return _fit_devices(instance, replace(state, boundaries=tuple(bounds), recompute=tuple(modes)))


def _move_boundary(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    """Shift the end of one chunk (not the last) by one layer, keeping every chunk non-empty."""
    if len(state.boundaries) < 2:
        return None
    chunk = rng.randrange(len(state.boundaries) - 1)
    first = state.boundaries[chunk - 1] + 1 if chunk > 0 else 0
    shifted = state.boundaries[chunk] + rng.choice((-1, 1))
    if not first <= shifted < state.boundaries[chunk + 1]:
        return None
    bounds = list(state.boundaries)
    bounds[chunk] = shifted
    return replace(state, boundaries=tuple(bounds))


def _move_virtual(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    """Another allowed number of virtual stages (S >= 2 for v > 1), chunks split evenly."""
    others = [v for v in instance.training.virtual_stages
              if v != state.virtual and (v == 1 or state.num_stages >= 2)]
    return _resplit(instance, state, state.num_stages, rng.choice(others)) if others else None


def _move_recompute(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    """Another allowed recompute mode for one stage (all its chunks); under a launcher, which
    applies one setting to all, for every stage."""
    stage = rng.randrange(state.num_stages)
    others = [m for m in instance.training.recompute_modes if m is not state.recompute[stage]]
    if not others:
        return None
    mode = rng.choice(others)
    if one_recompute_mode(instance.training.launcher):
        return replace(state, recompute=(mode,) * state.num_stages)
    modes = list(state.recompute)
    modes[stage] = mode
    return replace(state, recompute=tuple(modes))


def _move_placement(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    """Swap the device of one used position with any other position of the order."""
    devices = len(state.device_order)
    if devices < 2:
        return None
    used = rng.randrange(state.devices_used)
    other = rng.randrange(devices - 1)
    other += other >= used
    order = list(state.device_order)
    order[used], order[other] = order[other], order[used]
    return replace(state, device_order=tuple(order))


_MOVES = {"choice": _move_choice, "microbatch": _move_microbatch, "zero": _move_zero,
          "dp": _move_dp, "stages": _move_stages, "boundary": _move_boundary,
          "virtual": _move_virtual, "recompute": _move_recompute, "placement": _move_placement}
