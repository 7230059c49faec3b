"""Floor 1, profiles: from a model and a device to the per-layer costs an instance holds.

- :mod:`.kernels` (device specifications and the GEMM / attention / memory kernel model)
  and :mod:`.kernel_tables` (measured kernel tables it is checked against);
- :mod:`.transformer` (transformer descriptions) and :mod:`.hfconfig` (Hugging Face
  configs read into them);
- :mod:`.profiler`: a transformer on a device as layer profiles per (tp, ep, microbatch);
- :mod:`.presets`: named models, devices, networks and optimizers; :mod:`.devicefile`:
  devices as files (calibrated presets);
- :mod:`.reference_formulas`: the Megatron-LM papers' FLOP, parameter and memory
  formulas the profiler is checked against.

Imports only :mod:`nest_cp.model`.
"""
