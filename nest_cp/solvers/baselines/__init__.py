"""Baselines for throughput comparison tables (DESIGN §5): manual, phaze, mcmc, fixed.

Each is a backend ``(instance, SolveOptions) -> SolveResult`` whose plan the
registry referees with the evaluator.  They are heuristics: a plan comes back
FEASIBLE without a bound; no plan comes back UNKNOWN with a message (their rules
failing proves nothing), or INFEASIBLE from phaze when its DP proves nothing fits.

What lives where: ``manual`` (Megatron's rules of thumb, and ``fixed``, the user's
degrees), ``mcmc`` (the random walk), ``phaze`` (the network-blind DP), and
``_common`` (Megatron-style plans from chosen degrees: even splits, the recompute
rule, the default rank order; result records).  None of them prices a plan: they
ask :class:`nest_cp.cost.evaluate.Evaluator`.
"""

from nest_cp.solvers.baselines._common import fit_recompute, megatron_plan, uniform_split
from nest_cp.solvers.baselines.manual import node_size, solve_fixed, solve_manual
from nest_cp.solvers.baselines.mcmc import solve_mcmc
from nest_cp.solvers.baselines.phaze import flat_instance, solve_phaze

__all__ = ["fit_recompute", "flat_instance", "megatron_plan", "node_size", "solve_fixed",
           "solve_manual", "solve_mcmc", "solve_phaze", "uniform_split"]
