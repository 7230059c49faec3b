"""``python -m nest_cp.cli``: the ``nest-cp`` command."""

from nest_cp.cli.main import main

main()
