"""Test helper: the DP's v = 1 shapes of an instance, each with the plain description the
exhaustive per-shape search takes (the bound tests compare the two shape by shape)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace

from nest_cp.cost import terms as cost
from nest_cp.dp.compose import Shape


def v1_shapes(search, instance, min_dp: int = 1,
              keep: Callable = lambda config: True) -> Iterator[tuple[int, Shape,
                                                                        SimpleNamespace]]:
    """Every v = 1 shape (config, S, d >= ``min_dp``, z) whose configuration ``keep`` admits:
    (choice index, the DP's Shape of ``search``, the exhaustive search's description)."""
    devices = instance.cluster.num_devices
    for choice_index, (config, microbatch) in enumerate(instance.choices):
        if not keep(config):
            continue
        table = search._table(choice_index)
        for stages in range(1, table.num_layers + 1):
            for dp in range(min_dp, devices // (config.devices * stages) + 1):
                microbatches = cost.num_microbatches(instance.training.global_batch,
                                                     microbatch, config, dp)
                for zero in instance.training.zero_stages:
                    yield choice_index, Shape(table, stages, dp, 1, zero, microbatches), \
                        SimpleNamespace(config=config, microbatch=microbatch, zero=zero,
                                        dp=dp, num_stages=stages)
