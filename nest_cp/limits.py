"""Size limits every backend can honour exactly.

Ticks are integers, and every backend must agree on them to the tick: the DP uses
int64 arrays, CP-SAT int64 coefficients, and the MILP double-precision floats,
which represent integers exactly only up to 2**53.  An instance whose iteration
time could exceed :data:`MAX_TICKS` is therefore rejected when it is loaded, with
a message saying to use a coarser tick, instead of overflowing in one backend
and not in another.
"""

from __future__ import annotations

MAX_TICKS = 2**53        # integers exact in every backend (doubles in the MILP)
MAX_DEVICES = 2**20      # devices in a cluster
MAX_LAYERS = 100_000     # layers in a workload chain
