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
MAX_MODEL_WIDTH = 2**24  # a model dimension (hidden, FFN, vocabulary): 64x today's largest

# Input limits: what the readers accept before parsing a value (io.read_document).
MAX_INPUT_BYTES = 64 * 2**20   # one instance or plan file (the NEST grid's largest: 9 KiB)
MAX_INT = 2**63 - 1            # every integer field (bytes, parameters, batch sizes, ids)
MAX_INT_DIGITS = 19            # longer integer literals are refused at their field
MAX_YAML_NODES = 10_000_000    # values of a YAML document with its aliases expanded
MAX_PROVENANCE_ENTRIES = 64    # names in a provenance mapping, texts in one of its lists
