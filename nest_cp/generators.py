"""Seeded random small instances for the exact backends' tests and benchmark.

Numbers are synthetic but shaped like transformer layers (milliseconds of
compute, GB of parameters and activations, MB of boundary tensors, TP
all-reduces, EP all-to-alls), so every cost term of DESIGN §3 is exercised.
"""

from __future__ import annotations

import random

from nest_cp.model import (
    Cluster,
    Collective,
    CollectiveGroup,
    CollectiveKind,
    GraphNetwork,
    HierarchicalNetwork,
    Instance,
    IntraConfig,
    Layer,
    LayerProfile,
    Link,
    Optimizer,
    Phase,
    RecomputeMode,
    Tier,
    TrainingSetup,
    Workload,
)

_GB = 10**9


def random_instance(seed: int, num_layers: int = 3, tier_sizes: tuple[int, ...] = (2, 2),
                    configs: tuple[IntraConfig, ...] = (IntraConfig(),),
                    microbatches: tuple[int, ...] = (1,), zero_stages: tuple[int, ...] = (0,),
                    recompute_modes: tuple[RecomputeMode, ...] = (RecomputeMode.NONE,
                                                                  RecomputeMode.FULL),
                    virtual_stages: tuple[int, ...] = (1,), overlap_grad_reduce: bool = False,
                    global_batch: int = 8, hbm_bytes: int = 80 * _GB, graph: bool = False,
                    comm_scale: int = 1, num_devices: int | None = None,
                    identical_blocks: bool = False) -> Instance:
    """A random instance on a hierarchical network of ``tier_sizes`` (or a random graph).

    ``comm_scale`` multiplies every boundary tensor and collective volume, to make
    communication (and so placement) matter as much as compute.  ``num_devices``
    below the product of the tier sizes leaves the last domains partial.  Every
    profile carries selective-recomputation data (a quarter of the forward rerun,
    half the activations kept), so any ``recompute_modes`` may be allowed.
    ``identical_blocks`` gives every layer but the first and the last the second layer's
    profiles: an embedding, identical blocks and a head, the shape of the preset models
    (the DP searches v > 1 there by block counting); the random draws are the same.
    """
    rng = random.Random(seed)
    if num_devices is None:
        num_devices = 1
        for size in tier_sizes:
            num_devices *= size
    layers = tuple(_layer(rng, index, configs, microbatches, comm_scale)
                   for index in range(num_layers))
    if identical_blocks and num_layers >= 3:
        layers = (layers[0], *(Layer(f"block{index}", layers[1].profiles)
                               for index in range(1, num_layers - 1)), layers[-1])
    network = _random_graph(rng, num_devices) if graph else _hierarchy(rng, tier_sizes)
    cluster = Cluster(num_devices, hbm_bytes, network, name=f"random-{seed}")
    training = TrainingSetup(global_batch=global_batch, seq_len=1, microbatches=microbatches,
                             optimizer=Optimizer(2, 2, 12), zero_stages=zero_stages,
                             recompute_modes=recompute_modes, virtual_stages=virtual_stages,
                             overlap_grad_reduce=overlap_grad_reduce)
    return Instance(Workload(f"random-{seed}", layers), cluster, training,
                    name=f"random-{seed}-L{num_layers}-N{num_devices}")


def _hierarchy(rng: random.Random, tier_sizes: tuple[int, ...]) -> HierarchicalNetwork:
    tiers, bandwidth, latency = [], 1e11, 1e-6
    for index, size in enumerate(tier_sizes):
        tiers.append(Tier(f"tier{index}", size, bandwidth, latency))
        bandwidth = bandwidth / rng.choice((2, 4, 10))
        latency = latency * rng.choice((2, 5, 10))
    return HierarchicalNetwork(tuple(tiers))


def _random_graph(rng: random.Random, num_devices: int) -> GraphNetwork:
    """Devices hang off two switches joined by a slow link, plus random direct links."""
    links = [Link(device, "sw0" if device < num_devices // 2 else "sw1",
                  rng.choice((5e10, 1e11)), rng.choice((1e-6, 2e-6))) for device in
             range(num_devices)]
    links.append(Link("sw0", "sw1", rng.choice((5e9, 1e10)), 1e-5))
    for _ in range(num_devices // 2):
        a, b = rng.sample(range(num_devices), 2)
        links.append(Link(a, b, rng.choice((2e10, 2e11)), rng.choice((5e-7, 3e-6))))
    return GraphNetwork(("sw0", "sw1"), tuple(links))


def _layer(rng: random.Random, index: int, configs, microbatches, comm_scale: int) -> Layer:
    fwd_ms = rng.choice((0.5, 1.0, 1.5, 2.0))
    params = rng.choice((1, 2, 3)) * 2 * 10**8
    act = rng.choice((2, 4, 8)) * 10**9
    out = rng.choice((1, 2, 4)) * 10**6 * comm_scale
    experts = rng.random() < 0.3
    profiles = {}
    for config in configs:
        for microbatch in microbatches:
            profiles[(config, microbatch)] = _profile(fwd_ms, params, act, out, experts,
                                                      config, microbatch)
    return Layer(f"layer{index}", profiles)


def _profile(fwd_ms, params, act, out, experts, config: IntraConfig, microbatch: int):
    width = config.tp * config.ep
    collectives = []
    if config.tp > 1:
        for phase in (Phase.FWD, Phase.BWD):
            collectives.append(Collective(CollectiveKind.ALL_REDUCE, out * microbatch,
                                          CollectiveGroup.TP, phase))
    if config.ep > 1 and experts:
        for phase in (Phase.FWD, Phase.BWD):
            collectives.append(Collective(CollectiveKind.ALL_TO_ALL, out * microbatch,
                                          CollectiveGroup.EP, phase))
    expert_params = params // width if experts else 0
    dense_params = (params // 4 if experts else params) // config.tp
    fwd_s = round(fwd_ms * microbatch / config.tp * 1e-3, 9)
    act_bytes = act * microbatch // config.tp
    return LayerProfile(
        fwd_s=fwd_s, bwd_s=round(2 * fwd_ms * microbatch / config.tp * 1e-3, 9),
        dense_params=dense_params, expert_params=expert_params,
        act_bytes=act_bytes, ckpt_bytes=out * microbatch,
        out_bytes=out * microbatch, collectives=tuple(collectives),
        sel_fwd_s=round(fwd_s / 4, 9), sel_act_bytes=act_bytes // 2)


def latency_trap_instance() -> Instance:
    """Three devices, all pairs at 100 GB/s, but the pair (0, 1) has 1 ms latency.

    Links: 0–1 at 100 GB/s, 1 ms; 0–2 at 100 GB/s, 1 µs; 1–2 at 50 GB/s, 1 µs.  The
    widest path 0–1 is the direct link (1 ms); 0–2 is direct (1 µs); 1–2 goes via 0
    (100 GB/s, 1.001 ms).  One bandwidth level, so the canonical order is 0, 1, 2.
    Two layers whose weights do not fit on one device force S = 2, and a·S·d ≤ 3
    forces d = 1: every layout then puts the two stages on positions 0 and 1 of the
    canonical order, devices 0 and 1, paying 1 ms per transfer, while the full space
    puts them on devices 0 and 2 (1 µs).  So the structural gap is strictly positive.
    """
    profile = LayerProfile(fwd_s=1e-3, bwd_s=2e-3, dense_params=10**9, expert_params=0,
                           act_bytes=10**9, ckpt_bytes=10**7, out_bytes=10**6)
    layers = tuple(Layer(f"block{i}", {(IntraConfig(), 1): profile}) for i in range(2))
    links = (Link(0, 1, 1e11, 1e-3), Link(0, 2, 1e11, 1e-6), Link(1, 2, 5e10, 1e-6))
    cluster = Cluster(3, 20 * 10**9, GraphNetwork((), links), name="latency-trap")
    training = TrainingSetup(global_batch=4, seq_len=1, microbatches=(1,), zero_stages=(0,),
                             recompute_modes=(RecomputeMode.NONE,))
    return Instance(Workload("two-blocks", layers), cluster, training, name="latency-trap")
