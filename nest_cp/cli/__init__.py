"""Floor 7, the command line: ``nest-cp`` and what only it prints, draws or exports.

- :mod:`.main`: the click group (entry point ``nest_cp.cli:main``) wiring every command in;
- one module per command group: :mod:`.instance`, :mod:`.evaluate`, :mod:`.solve`,
  :mod:`.plans` (``export``, ``show``), :mod:`.calibrate`; :mod:`.options` holds what
  they share (option parsing, output-path checks, number formats);
- what the commands render: :mod:`.report` (a plan as text), :mod:`.show` (a plan drawn
  with matplotlib), :mod:`.export` (Megatron-LM, torchtitan and DeepSpeed launch files).

Nothing below this floor imports it.
"""

from nest_cp.cli.main import main

__all__ = ["main"]
