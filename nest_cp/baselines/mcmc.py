"""``mcmc``: a FlexFlow-style Metropolis random walk over the full plan space.

FlexFlow (Jia et al., SysML'19, "Beyond data and model parallelism for deep
neural networks", §5) searches parallelisation strategies by Markov chain
Monte Carlo: propose a random local change, simulate it, accept it with the
Metropolis rule.  Here a state is every choice of DESIGN §2 — configuration,
microbatch b, ZeRO stage z, data parallelism d, stage boundaries, one
recompute flag per stage — plus a permutation of all device ids; rank
(stage, replica, j) runs on the device at its Megatron-layout position of that
permutation, so every injective placement is reachable.

Moves (weight in brackets, drawn with ``random.Random``): another
(configuration, b) pair [1]; another b for the same configuration [1];
another ZeRO stage [1]; another d [2]; split one stage in two or merge two
neighbours [2]; shift one stage boundary by a layer [3]; flip one stage's
recompute flag [1]; swap a used device with any device [4].  A move that
would need more devices than the cluster has first shrinks d; if even d = 1
does not fit, the move is void.

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
Proposals are priced by a memoising copy of the evaluator's arithmetic
(``_pricing.PlanPricer``, tested equal to the tick); the returned plan is
priced by the evaluator itself.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, replace

from nest_cp.baselines._common import empty_result, feasible_result, uniform_split
from nest_cp.baselines._pricing import PlanPricer
from nest_cp.baselines.manual import solve_manual
from nest_cp.errors import BackendOptionError
from nest_cp.model import Instance, IntraConfig, RecomputeMode
from nest_cp.network import NetworkModel
from nest_cp.plan import MEGATRON_LAYOUT, Plan, Stage
from nest_cp.result import SolveOptions, SolveResult, Space, Status

logger = logging.getLogger(__name__)

DEFAULT_BUDGET = 2000
DEFAULT_CHAINS = 4
START_TEMPERATURE = 0.05
END_TEMPERATURE = 0.0005
MOVE_WEIGHTS = {"choice": 1, "microbatch": 1, "zero": 1, "dp": 2, "stages": 2, "boundary": 3,
                "recompute": 1, "placement": 4}


@dataclass(frozen=True, slots=True)
class _State:
    """One point of the walk; ``boundaries[s]`` is the last layer of stage s."""

    config: IntraConfig
    microbatch: int
    zero: int
    dp: int
    boundaries: tuple[int, ...]
    recompute: tuple[bool, ...]  # full recomputation per stage (selective is not searched yet)
    device_order: tuple[int, ...]  # a permutation of every device id

    @property
    def num_stages(self) -> int:
        return len(self.boundaries)

    @property
    def devices_used(self) -> int:
        return self.config.devices * self.num_stages * self.dp

    def stages(self) -> tuple[Stage, ...]:
        firsts = (0, *(last + 1 for last in self.boundaries[:-1]))
        return tuple(Stage(first, last, RecomputeMode.FULL if flag else RecomputeMode.NONE)
                     for first, last, flag in zip(firsts, self.boundaries, self.recompute))

    def plan(self) -> Plan:
        placement = MEGATRON_LAYOUT.placement(self.config, self.num_stages, self.dp,
                                              self.device_order)
        return Plan(self.config, self.microbatch, self.zero, self.dp, self.stages(), placement)

    def key(self) -> tuple:
        """Identifies the plan: unused devices at the end of the order do not matter."""
        return (self.config, self.microbatch, self.zero, self.dp, self.boundaries,
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
    network = NetworkModel(instance.cluster)
    walk = _Walk(instance, network, deadline=started + options.time_limit_s)
    master = random.Random(options.seed)
    chain_seeds = [master.getrandbits(64) for _ in range(chains)]
    manual = solve_manual(instance, options).plan
    for chain, seed in enumerate(chain_seeds):
        rng = random.Random(seed)
        start = _state_from_plan(manual, network) if chain == 0 and manual else \
            _random_state(instance, network, rng)
        steps = budget // chains + (1 if chain < budget % chains else 0)
        walk.run_chain(start, steps, rng)
    stats = walk.stats()
    if walk.best is None:
        return empty_result("mcmc", Status.UNKNOWN, started,
                            f"no fitting plan among {stats['proposals']} proposals", stats,
                            space=Space.FULL)
    return feasible_result("mcmc", instance, walk.best.plan(), network, started,
                           stats=stats, space=Space.FULL)


class _Walk:
    """The chains' shared evaluator cache and best plan; one Metropolis chain per run_chain."""

    def __init__(self, instance: Instance, network: NetworkModel, deadline: float):
        self.instance, self.deadline = instance, deadline
        self.pricer = PlanPricer(instance, network)
        self.cache: dict[tuple, _Scored] = {}
        self.best: _State | None = None
        self.best_ticks: int | None = None
        self.proposals = self.accepted = 0
        self.chain_best: list[int | None] = []
        self.stopped_by_time = False

    def run_chain(self, state: _State, steps: int, rng: random.Random) -> None:
        scored = self.score(state)
        chain_best = scored.objective_ticks if scored.fits else None
        for step in range(steps):
            if time.perf_counter() > self.deadline:
                self.stopped_by_time = True
                break
            temperature = START_TEMPERATURE * (END_TEMPERATURE / START_TEMPERATURE) ** (
                step / max(1, steps - 1))
            proposal = _propose(self.instance, state, rng)
            self.proposals += 1
            if proposal is None:
                continue
            candidate = self.score(proposal)
            if candidate.fits and (chain_best is None or candidate.objective_ticks < chain_best):
                chain_best = candidate.objective_ticks
            if _accept(scored.energy, candidate.energy, temperature, rng):
                state, scored = proposal, candidate
                self.accepted += 1
        self.chain_best.append(chain_best)

    def score(self, state: _State) -> _Scored:
        key = state.key()
        if key not in self.cache:
            self.cache[key] = self._evaluate(state)
        scored = self.cache[key]
        if scored.fits and (self.best_ticks is None or scored.objective_ticks < self.best_ticks):
            self.best, self.best_ticks = state, scored.objective_ticks
        return scored

    def _evaluate(self, state: _State) -> _Scored:
        ticks, overflow = self.pricer.price(state.plan())
        if overflow <= 0:
            return _Scored(float(ticks), ticks, True)
        return _Scored(ticks * (2 + overflow / self.pricer.limit), ticks, False)

    def stats(self) -> dict:
        return {"proposals": self.proposals, "evaluations": len(self.cache),
                "accepted": self.accepted, "chain_best_ticks": list(self.chain_best),
                "stopped_by_time": self.stopped_by_time}


def _accept(energy: float, new_energy: float, temperature: float, rng: random.Random) -> bool:
    """Metropolis rule on the relative energy change."""
    if new_energy <= energy:
        return True
    return rng.random() < math.exp(-(new_energy - energy) / (temperature * energy))


# ------------------------------------------------------------------ states and moves


def _random_state(instance: Instance, network: NetworkModel, rng: random.Random) -> _State:
    """A random structured start: any choice, depth and d that fit the device count."""
    devices = instance.cluster.num_devices
    choices = [(c, b) for c, b in instance.choices if c.devices <= devices]
    if not choices:
        raise BackendOptionError(f"expected a configuration of at most {devices} devices")
    config, microbatch = rng.choice(choices)
    num_stages = rng.randint(1, min(instance.workload.num_layers, devices // config.devices))
    dp = rng.randint(1, devices // (config.devices * num_stages))
    stages = uniform_split(instance.workload.num_layers, num_stages)
    return _State(config, microbatch, rng.choice(instance.training.zero_stages), dp,
                  tuple(stage.last_layer for stage in stages),
                  (_full_allowed(instance),) * num_stages, network.canonical_order())


def _state_from_plan(plan: Plan, network: NetworkModel) -> _State:
    """The state whose device order reproduces ``plan``'s placement; unused devices follow."""
    order: dict[int, int] = {}
    for stage, replicas in enumerate(plan.placement):
        for replica, ranks in enumerate(replicas):
            for rank, device in enumerate(ranks):
                order[MEGATRON_LAYOUT.position(stage, replica, rank, plan.config,
                                               plan.num_stages, plan.num_replicas)] = device
    used = [order[position] for position in range(len(order))]
    rest = [device for device in network.canonical_order() if device not in set(used)]
    return _State(plan.config, plan.microbatch, plan.zero, plan.num_replicas,
                  tuple(stage.last_layer for stage in plan.stages),
                  tuple(stage.recompute is RecomputeMode.FULL for stage in plan.stages),
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
    """Split a stage of two or more layers at a random cut, or merge two neighbours."""
    bounds, flags = list(state.boundaries), list(state.recompute)
    firsts = [0, *(last + 1 for last in bounds[:-1])]
    if rng.random() < 0.5:
        splittable = [s for s in range(len(bounds)) if bounds[s] > firsts[s]]
        if not splittable:
            return None
        stage = rng.choice(splittable)
        bounds.insert(stage, rng.randint(firsts[stage], bounds[stage] - 1))
        flags.insert(stage, flags[stage])
    else:
        if len(bounds) < 2:
            return None
        stage = rng.randrange(len(bounds) - 1)
        del bounds[stage]
        flags[stage + 1] = flags[stage] or flags[stage + 1]
        del flags[stage]
    return _fit_devices(instance, replace(state, boundaries=tuple(bounds), recompute=tuple(flags)))


def _move_boundary(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    """Shift the end of one stage (not the last) by one layer, keeping every stage non-empty."""
    if state.num_stages < 2:
        return None
    stage = rng.randrange(state.num_stages - 1)
    first = state.boundaries[stage - 1] + 1 if stage > 0 else 0
    shifted = state.boundaries[stage] + rng.choice((-1, 1))
    if not first <= shifted < state.boundaries[stage + 1]:
        return None
    bounds = list(state.boundaries)
    bounds[stage] = shifted
    return replace(state, boundaries=tuple(bounds))


def _full_allowed(instance: Instance) -> bool:
    return RecomputeMode.FULL in instance.training.recompute_modes


def _move_recompute(instance: Instance, state: _State, rng: random.Random) -> _State | None:
    if not _full_allowed(instance):
        return None
    stage = rng.randrange(state.num_stages)
    flags = list(state.recompute)
    flags[stage] = not flags[stage]
    return replace(state, recompute=tuple(flags))


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
          "recompute": _move_recompute, "placement": _move_placement}
