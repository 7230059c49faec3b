"""Floor 5, the solvers: every backend that returns a plan, and the registry that referees it.

- :mod:`.registry`: ``solve(instance, backend, options)``, backends by import path (the
  structured DP is :mod:`nest_cp.dp`, from the top-level ``dp/`` folder, on this floor too);
- :mod:`.exact` (CP-SAT and MILP models of the same costs; :mod:`.cpsat`, :mod:`.milp`
  are their entry points), :mod:`.brute` and :mod:`.brute_sdp` (exhaustive search);
- :mod:`.certify`: proven intervals for the full space at scale;
- :mod:`.baselines`: Megatron's rules of thumb, Phaze's network-blind DP, MCMC.

Every plan is priced by :mod:`nest_cp.cost.evaluate`; nothing here imports the harness or
the command line.
"""
