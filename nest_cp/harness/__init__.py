"""Floor 6, the harness: studies that run the solvers over many instances or measured runs.

Beside :mod:`nest_cp.verify` (certification, gap tables and the soak, from the top-level
``verify/`` folder):

- :mod:`.compare`: throughput of several backends on many instances;
- :mod:`.executors`: where tasks run (a local process pool or Ray);
- :mod:`.generators`: seeded random small instances for tests, benchmarks and the soak;
- :mod:`.sweep` (network and cluster parameters over a grid, the DP's plan and a certified
  interval per point) and :mod:`.sweep_report` (its tables and plot);
- :mod:`.runs` (measured training runs and nest-cp's prediction of each) and
  :mod:`.calibrate` (a device's efficiencies fitted to such runs).
"""
