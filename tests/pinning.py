"""Test helpers: the objective an exact model gives a plan pinned into it, random placements
and SDP plans, the DP's SDP pricing checked against the evaluator, and a counting clock."""

from __future__ import annotations

from ortools.sat.python import cp_model

from nest_cp.solvers.exact.adapters import CpSatAdapter
from nest_cp.solvers.exact.skeleton import build_model, hint_model


def pinned_cpsat(instance, sub, network, space, plan) -> int | None:
    """CP-SAT's objective of ``sub``'s model with every variable fixed to ``plan`` (None when
    the model refuses the plan)."""
    adapter = CpSatAdapter()
    handles = build_model(adapter, instance, sub, network, space, None)
    hint_model(adapter, handles, plan)
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    status = solver.solve(adapter.model)
    if status == cp_model.INFEASIBLE:
        return None
    assert status == cp_model.OPTIMAL
    return round(solver.objective_value)


def random_placement(rng, sub, network, space):
    """A random placement of a sub-problem's ranks: a random rank layout's in the structured
    space, any injective one in the full space."""
    from nest_cp.model.plan import all_layouts
    from nest_cp.model.result import Space

    ranks = sub.config.devices
    if space is Space.STRUCTURED:
        return rng.choice(all_layouts()).placement(sub.config, sub.num_stages, sub.dp,
                                                   network.canonical_order())
    devices = rng.sample(range(network.num_devices), ranks * sub.num_stages * sub.dp)
    return tuple(tuple(tuple(devices[(s * sub.dp + r) * ranks + j] for j in range(ranks))
                       for r in range(sub.dp)) for s in range(sub.num_stages))


def sdp_plan_on_devices(rng, instance, config, microbatch, workers, mask, devices):
    """An SDP plan of ``mask`` on ``devices`` (worker w on the w-th block of t·e), with a
    random ZeRO stage (0-2) and recompute mode."""
    from nest_cp.model.instance import Strategy
    from nest_cp.model.plan import Plan, Stage

    placement = (tuple(tuple(devices[w * config.devices:(w + 1) * config.devices])
                       for w in range(workers)),)
    return Plan(config, microbatch, rng.choice([0, 1, 2]), workers,
                (Stage(0, instance.workload.num_layers - 1,
                       rng.choice(instance.training.recompute_modes)),),
                placement, strategy=Strategy.SDP, sdp=mask)


def sdp_prices_match(rng, instance, draws: int, random_plan) -> list:
    """Draw ``draws`` plans with ``random_plan(rng, instance)`` (None: skipped) and check that
    the DP's SDP pricing gives each the evaluator's objective and memory; the (plan,
    evaluation) pairs checked."""
    from nest_cp import evaluate
    from nest_cp.dp.sdp import price_plan

    checked = []
    for _ in range(draws):
        plan = random_plan(rng, instance)
        if plan is None:
            continue
        expected = evaluate(instance, plan)
        assert not expected.malformed_fields, expected.violations
        assert price_plan(instance, plan) == (expected.objective_ticks,
                                              expected.sdp.memory_bytes)
        checked.append((plan, expected))
    return checked


class SteppingClock:
    """A fake ``time.perf_counter`` advancing one second per reading, so a deadline check
    is a count of readings, not a race with the machine's speed."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now
