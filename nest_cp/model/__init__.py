"""Floor 0, the model: what is planned, the plan, and the vocabulary every floor speaks.

- :mod:`.instance`: the three inputs (workload, cluster, training setup) as frozen
  dataclasses, validated on construction;
- :mod:`.plan`: the output (degrees, stages, placement, SDP mask) and rank layouts;
- :mod:`.network`: hierarchical and graph networks as paths with bandwidth and latency;
- :mod:`.result`: the options every backend takes and the one result record;
- :mod:`.errors`, :mod:`.exits` (the one exit-code contract), :mod:`.limits` (input and
  tick limits), :mod:`.ticks` (the one seconds-to-ticks conversion), :mod:`.progress`
  (progress of long work), :mod:`.documents` (JSON / YAML within the input limits).

Imports nothing of nest_cp outside this folder.
"""
