"""Seeded random small instances for the exact backends' tests, benchmark and the soak.

Numbers are synthetic but shaped like transformer layers (milliseconds of
compute, GB of parameters and activations, MB of boundary tensors, TP
all-reduces, EP all-to-alls), so every cost term of DESIGN §3 is exercised.
``draw_tiny_recipe`` / ``tiny_instance`` draw every choice of an instance from one
seed, from tables of drawers (TRAINING_CHOICES, NETWORK_BUILDERS) that a new
choice extends by one entry.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from nest_cp.model.instance import (
    Cluster,
    Collective,
    CollectiveGroup,
    CollectiveKind,
    CpComm,
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
    SdpLevel,
    SdpMasking,
    SdpSetup,
    Strategy,
    Tier,
    TrainingSetup,
    Workload,
)
from nest_cp.model.launchers.search import Launcher
from nest_cp.model.plan import all_layouts

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


# ------------------------------------------------------------------ tiny random instances
#
# The soak (nest_cp.verify.soak) draws one tiny instance per seed.  Every choice the cost
# model offers is drawn by one entry of a table below, so a new choice (a TrainingSetup
# field, a profile field, a network kind) is one entry away: add a drawer, nothing else.


@dataclass(frozen=True, slots=True)
class TinyRecipe:
    """Everything a tiny instance is built from; ``training`` holds TrainingSetup keywords."""

    seed: int
    num_layers: int
    num_devices: int
    network: str                      # a key of NETWORK_BUILDERS
    configs: tuple[IntraConfig, ...]
    moe_layers: tuple[bool, ...]      # which layers hold experts
    memory_scale: float               # HBM as a fraction of the whole model's training state
    comm_scale: int                   # multiplies boundary and collective volumes
    training: dict = field(default_factory=dict)
    sdp: dict | None = None           # SDP draw (DESIGN §7): levels, maskings, holders, units
    identical_blocks: bool = False    # layers between the first and the last are one block
    v3: dict | None = None            # cost model v3 draw: tier / link efficiencies, optimizer

    def describe(self) -> dict:
        """Plain data for reports: the kind of instance this is."""
        return {"layers": self.num_layers, "devices": self.num_devices, "network": self.network,
                "moe": any(self.moe_layers),
                "configs": [f"{c.tp}x{c.ep}" + (f"x{c.cp}" if c.cp > 1 else "")
                            for c in self.configs],
                "memory_scale": round(self.memory_scale, 4),
                **{name: list(value) if isinstance(value, tuple) else
                   value.value if isinstance(value, Launcher | CpComm) else value
                   for name, value in self.training.items()},
                **({"sdp": self.sdp} if self.sdp else {}),
                **({"identical_blocks": True} if self.identical_blocks else {}),
                **({"v3": self.v3} if self.v3 else {})}


def _draw_microbatches(rng: random.Random) -> tuple[int, ...]:
    return tuple(sorted(rng.sample((1, 2, 4), rng.choice((1, 1, 2)))))


def _draw_zero_stages(rng: random.Random) -> tuple[int, ...]:
    return tuple(sorted(rng.sample((0, 1, 2, 3), rng.choice((1, 1, 2, 4)))))


def _draw_tick(rng: random.Random) -> float:
    return rng.choice((1e-9, 1e-9, 1e-9, 1e-8, 1e-6))


def _draw_recompute_modes(rng: random.Random) -> tuple[RecomputeMode, ...]:
    none, selective, full = RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL
    return rng.choice(((none,), (none, full), (none, full), (none, selective),
                       (none, selective, full), (none, selective, full), (full,)))


def _draw_virtual_stages(rng: random.Random) -> tuple[int, ...]:
    return rng.choice(((1,), (1,), (1, 2), (1, 2), (1, 3), (1, 2, 4), (2,)))


# TrainingSetup keyword -> drawer; a new training choice is one more entry here
TRAINING_CHOICES: dict[str, Callable[[random.Random], object]] = {
    "microbatches": _draw_microbatches,
    "zero_stages": _draw_zero_stages,
    "recompute_modes": _draw_recompute_modes,
    "virtual_stages": _draw_virtual_stages,
    "overlap_grad_reduce": lambda rng: rng.random() < 0.4,
    "global_batch": lambda rng: rng.choice((2, 4, 8, 8, 16, 32)),
    "tick_s": _draw_tick,
}


def draw_tiny_recipe(seed: int, max_layers: int = 6, max_devices: int = 16,
                     max_structured_plans: int | None = None,
                     max_full_placements: int | None = None) -> TinyRecipe:
    """The recipe of seed ``seed``: 1..max_layers layers, 2..max_devices devices, a hierarchy
    or a graph, dense or MoE, memory from tight to loose, every training choice drawn.

    With ``max_structured_plans``, choices are dropped at random (a ZeRO stage, a
    microbatch size, a configuration, recomputation, a layer, devices) until the
    structured space holds at most that many plans (so brute force stays quick).
    A share of the seeds (:data:`CERTIFY_SHARE`, chosen by a stream of its own) is drawn
    by :func:`_certify_recipe` instead, shrunk also until the full space has at most
    ``max_full_placements`` placements; every other seed draws what it drew before.
    """
    v3, launcher = random.Random(f"v3-{seed}"), random.Random(f"launcher-{seed}")
    if random.Random(f"certify-{seed}").random() < CERTIFY_SHARE:
        return _with_tp_overlap(_with_launcher(_with_v3(_certify_recipe(
            seed, min(max_layers, 4), min(max_devices, 6), max_structured_plans,
            max_full_placements), v3), launcher), random.Random(f"tp-overlap-{seed}"))
    recipe = _draw_recipe(random.Random(seed), seed, max_layers, max_devices)
    shrink = random.Random(f"shrink-{seed}")
    while max_structured_plans is not None and \
            structured_plan_count(recipe) > max_structured_plans:
        recipe = _shrunk(recipe, shrink)
    recipe = _with_context(_with_sdp(recipe, random.Random(f"sdp-{seed}")),
                           random.Random(f"context-{seed}"))
    shrink = random.Random(f"context-shrink-{seed}")  # (only a recipe the draw widened)
    while max_structured_plans is not None and \
            structured_plan_count(recipe) > max_structured_plans:
        recipe = _shrunk(recipe, shrink)
    return _with_tp_overlap(_with_launcher(_with_v3(recipe, v3), launcher),
                            random.Random(f"tp-overlap-{seed}"))


CONTEXT_SHARE = 0.2  # the share of (non-SDP) seeds that also allow context widths c > 1


def _with_context(recipe: TinyRecipe, rng: random.Random) -> TinyRecipe:
    """Some recipes also allow context parallelism (docs/context-parallelism.md): widths
    {2} or {2, 4} beside 1, exchanged by p2p or a2a, the (1, 1) configuration and one other
    drawn configuration also profiled at each width that fits the devices.  SDP recipes keep
    c = 1 (SDP plans do).  From a stream of its own, so the rest of a seed's draw is
    unchanged; a recipe it widens beyond the brute-force budget is shrunk again."""
    if recipe.sdp is not None or rng.random() >= CONTEXT_SHARE:
        return recipe
    widths = rng.choice(((2,), (2,), (2, 4)))
    comm = rng.choice((CpComm.P2P, CpComm.A2A))
    bases = {IntraConfig(), rng.choice(recipe.configs)}
    added = {IntraConfig(base.tp, base.ep, width) for base in bases for width in widths
             if base.devices * width <= recipe.num_devices}
    if not added:
        return recipe
    configs = tuple(sorted(set(recipe.configs) | added, key=lambda c: (c.tp, c.ep, c.cp)))
    return dataclasses.replace(recipe, configs=configs, training={
        **recipe.training, "context_parallel": (1, *widths), "cp_comm": comm})


TP_OVERLAP_SHARE = 0.3  # the share of seeds whose TP collectives overlap the GEMMs


def _with_tp_overlap(recipe: TinyRecipe, rng: random.Random) -> TinyRecipe:
    """Some recipes hide their TP collectives behind the GEMMs (``tp_comm_overlap``, cost
    model §5 e); it binds on the recipes with t > 1 configurations whose TP groups fit in
    a tier-0 domain.  From a stream of its own, so the rest of a seed's draw is unchanged."""
    if rng.random() >= TP_OVERLAP_SHARE:
        return recipe
    return dataclasses.replace(recipe, training={**recipe.training, "tp_comm_overlap": True})


LAUNCHER_SHARE = 0.3  # the share of (non-SDP) seeds searched under a launcher's rules


def _with_launcher(recipe: TinyRecipe, rng: random.Random) -> TinyRecipe:
    """Some recipes are searched under a launcher's rules (training.launcher): the batch
    rule, one recompute mode, DeepSpeed's and torchtitan's refusals bind on tiny instances
    as on large ones.  SDP recipes stay unrestricted (no launcher runs SDP plans).  From a
    stream of its own, so the rest of a seed's draw is unchanged."""
    if recipe.sdp is not None or rng.random() >= LAUNCHER_SHARE:
        return recipe
    choice = rng.choice((Launcher.MEGATRON, Launcher.TORCHTITAN, Launcher.DEEPSPEED))
    training = {**recipe.training, "launcher": choice}
    if choice is Launcher.TORCHTITAN:  # it always overlaps the gradient reduction
        training["overlap_grad_reduce"] = True
    return dataclasses.replace(recipe, training=training)


V3_SHARE = 0.5  # the share of seeds that also draw cost model v3's choices


def _with_v3(recipe: TinyRecipe, rng: random.Random) -> TinyRecipe:
    """Some recipes also draw cost model v3's choices (docs/cost-model.md §5): efficiencies
    below 1 on tiers and links, Megatron's 2/4/12 optimizer bytes (so the ZeRO 1/2 sync's
    reduce-scatter and all-gather differ from an all-reduce) and ``overlap_param_gather``.
    Multi-channel groups need no draw: hierarchies with inner sizes 2-4 make them.  From a
    stream of its own, so the rest of a seed's draw is unchanged."""
    if rng.random() >= V3_SHARE:
        return recipe
    training = dict(recipe.training)
    training["overlap_param_gather"] = rng.random() < 0.5
    efficiencies = [rng.choice((1.0, 0.9, 0.8, 0.5, 0.37)) for _ in range(rng.randint(1, 3))]
    optimizer = list(rng.choice(((2, 2, 12), (2, 4, 12), (2, 4, 12), (4, 4, 8))))
    return dataclasses.replace(recipe, training=training, v3={
        "efficiencies": efficiencies, "optimizer": optimizer})


SDP_SHARE = 0.2  # the share of seeds that also allow SDP (when they have 8 devices or fewer)
CERTIFY_SHARE = 0.25  # the share of seeds drawn like the instances --certify-full got wrong


def _with_sdp(recipe: TinyRecipe, rng: random.Random) -> TinyRecipe:
    """Some recipes also allow SDP (DESIGN §7): both strategies, a drawn level, masking
    and holder set, and width slices on the maskable layers (all but the first and last of
    three or more).  Drawn from a stream of its own, so the plain draw of a seed is the
    same with or without it."""
    if rng.random() >= SDP_SHARE or recipe.num_devices > 8:
        return recipe
    levels = rng.choice((("block",), ("block",), ("neuron",), ("block", "neuron")))
    maskings = rng.choice((("forward",), ("forward",), ("backward",), ("forward", "backward")))
    holders = rng.choice(((), (), (1,), (2,), (1, 2)))
    return dataclasses.replace(recipe, sdp={
        "levels": levels, "maskings": maskings, "holders": holders,
        "units": [rng.choice((1, 2, 4)) for _ in range(recipe.num_layers)],
        "fractions": [rng.choice((0.75, 0.9, 1.0)) for _ in range(recipe.num_layers)]})


def _certify_recipe(seed: int, max_layers: int, max_devices: int,
                    max_structured_plans: int | None, max_full_placements: int | None
                    ) -> TinyRecipe:
    """A recipe shaped like the instances on which the full-space certificate claimed bounds
    above the optimum, small enough for exhaustive search of the full space: uneven
    hierarchies (tiers of size 1 or 3, outer tiers as fast as or faster than inner ones,
    partial domains), expert width 2 on layers without experts (no EP collective), identical
    blocks (block chains), memory mostly tight, and every v2 choice (recompute modes,
    overlapped gradient reduction; virtual stages on a few, which certification skips).
    Drawn from streams of its own, then shrunk like the plain draw until both brute-force
    budgets hold."""
    rng = random.Random(f"certify-draw-{seed}")
    num_layers = rng.randint(1, max_layers)
    num_devices = rng.randint(2, max_devices)
    widths = [(tp, ep) for tp in (1, 2, 4) for ep in (1, 2) if tp * ep <= num_devices]
    moe = rng.random() < 0.5
    if not moe:
        widths = [(tp, ep) for tp, ep in widths if ep == 1]
    chosen = rng.sample(widths, min(len(widths), rng.choice((1, 2, 2, 3))))
    configs = tuple(sorted({IntraConfig(tp, ep) for tp, ep in chosen} | {IntraConfig()},
                           key=lambda c: (c.tp, c.ep)))
    experts = moe and rng.random() < 0.5  # else ep > 1 without any EP collective
    identical = num_layers >= 2 and rng.random() < 0.5
    moe_layers = [experts and rng.random() < 0.6 for _ in range(num_layers)]
    if identical:  # one flag for all, so it stays true to the layers when layers are dropped
        moe_layers = [moe_layers[0]] * num_layers
    tight = rng.random() < 0.8
    memory_scale = math.exp(rng.uniform(math.log(1.0 / num_devices), 0.0)) if tight else 2.0
    training = {name: draw(rng) for name, draw in TRAINING_CHOICES.items()}
    training["virtual_stages"] = (1,) if rng.random() < 0.85 else (1, 2)
    training["overlap_grad_reduce"] = rng.random() < 0.5
    recipe = TinyRecipe(seed=seed, num_layers=num_layers, num_devices=num_devices,
                        network="hierarchy-uneven", configs=configs,
                        moe_layers=tuple(moe_layers), memory_scale=memory_scale,
                        comm_scale=rng.choice((1, 10, 100)), training=training,
                        identical_blocks=identical)
    shrink = random.Random(f"certify-shrink-{seed}")
    while (max_structured_plans is not None
           and structured_plan_count(recipe) > max_structured_plans) or \
            (max_full_placements is not None
             and full_placement_count(recipe) > max_full_placements):
        recipe = _shrunk(recipe, shrink)
    return recipe


def _block_of(index: int, num_layers: int) -> int:
    """The layer whose profiles layer ``index`` repeats in an identical-blocks recipe: the
    block (layer 1; layer 0 for two layers) for every layer between an embedding (with
    three layers or more) and a head (with four or more)."""
    first = 1 if num_layers >= 3 else 0
    last = num_layers - 1 if num_layers >= 4 else num_layers
    return first if first <= index < last else index


def full_placement_count(recipe: TinyRecipe) -> int:
    """Injective placements a full-space brute force of the recipe's instance enumerates."""
    devices = recipe.num_devices
    total = 0
    for config in recipe.configs:
        for stages in range(1, recipe.num_layers + 1):
            for replicas in range(1, devices // (config.devices * stages) + 1):
                total += math.perm(devices, config.devices * stages * replicas)
    return total * len(set(recipe.training.get("microbatches", (1,))))


def structured_plan_count(recipe: TinyRecipe) -> int:
    """Plans of structured space v2 (its 24 rank layouts per shape, an upper bound): the
    scale of what brute force evaluates, used to keep the draws small.  On three tiers or
    more the v3a space has more layouts (device orders, spare nodes first; on these tiny
    networks most coincide and are evaluated once), so there it is a scale, not a bound;
    kept as it was so that the seeded draws do not change."""
    layers, devices = recipe.num_layers, recipe.num_devices
    modes = len(recipe.training.get("recompute_modes", (RecomputeMode.NONE, RecomputeMode.FULL)))
    virtual = recipe.training.get("virtual_stages", (1,))
    zeros = len(recipe.training.get("zero_stages", (0,)))
    shapes = 0
    for config in recipe.configs:
        for stages in range(1, layers + 1):
            replicas = devices // (config.devices * stages)
            splits = sum(math.comb(layers - 1, stages * v - 1) for v in virtual
                         if stages * v <= layers and (v == 1 or stages >= 2))
            shapes += replicas * splits * modes ** stages
    return shapes * zeros * len(recipe.training.get("microbatches", (1,))) * len(all_layouts())


def _shrunk(recipe: TinyRecipe, rng: random.Random) -> TinyRecipe:
    """The recipe with one choice fewer (never below one of each)."""
    training = dict(recipe.training)
    options = []
    if len(training.get("zero_stages", ())) > 1:
        options.append("zero_stages")
    if len(training.get("microbatches", ())) > 1:
        options.append("microbatches")
    if len(recipe.configs) > 1:
        options.append("configs")
    for name in ("recompute_modes", "virtual_stages"):
        if len(training.get(name, ())) > 1:
            options.append(name)
    if recipe.num_layers > 1:
        options.append("layers")
    if not options:
        return dataclasses.replace(recipe, num_devices=max(2, recipe.num_devices // 2))
    choice = rng.choice(options)
    if choice in ("zero_stages", "microbatches", "recompute_modes", "virtual_stages"):
        values = list(training[choice])
        values.remove(rng.choice(values))
        training[choice] = tuple(values)
        return dataclasses.replace(recipe, training=training)
    if choice == "configs":
        configs = list(recipe.configs)
        configs.remove(rng.choice(configs[1:]))  # keep (1, 1)
        return dataclasses.replace(recipe, configs=tuple(configs))
    return dataclasses.replace(recipe, num_layers=recipe.num_layers - 1,
                               moe_layers=recipe.moe_layers[:-1])


def _draw_recipe(rng: random.Random, seed: int, max_layers: int, max_devices: int
                 ) -> TinyRecipe:
    num_layers = rng.randint(1, max_layers)
    num_devices = rng.randint(2, max_devices)
    widths = [(tp, ep) for tp in (1, 2, 4) for ep in (1, 2, 4) if tp * ep <= num_devices]
    moe = rng.random() < 0.35
    if not moe:
        widths = [(tp, ep) for tp, ep in widths if ep == 1]
    chosen = rng.sample(widths, min(len(widths), rng.choice((1, 2, 2, 3))))
    configs = tuple(sorted({IntraConfig(tp, ep) for tp, ep in chosen} | {IntraConfig()},
                           key=lambda c: (c.tp, c.ep)))
    moe_layers = tuple(moe and rng.random() < 0.6 for _ in range(num_layers))
    tight = rng.random() < 0.7
    memory_scale = math.exp(rng.uniform(math.log(1.0 / num_devices), 0.0)) if tight else 2.0
    return TinyRecipe(
        seed=seed, num_layers=num_layers, num_devices=num_devices,
        network=rng.choices([kind for kind, (_, weight) in NETWORK_BUILDERS.items() if weight],
                            [weight for _, weight in NETWORK_BUILDERS.values() if weight])[0],
        configs=configs, moe_layers=moe_layers,
        memory_scale=memory_scale, comm_scale=rng.choice((1, 1, 10, 100)),
        training={name: draw(rng) for name, draw in TRAINING_CHOICES.items()})


def tiny_instance(recipe: TinyRecipe) -> Instance:
    """Build the instance of ``recipe`` (deterministic: the recipe's seed drives the numbers)."""
    rng = random.Random(f"numbers-{recipe.seed}")
    microbatches = recipe.training.get("microbatches", (1,))
    # attention share and K/V volume per layer, from a stream of their own (None: no
    # context widths drawn, the layer as it always was)
    context_rng = random.Random(f"context-numbers-{recipe.seed}")
    has_context = any(config.cp > 1 for config in recipe.configs)
    layers = tuple(_tiny_layer(rng, index, recipe.configs, microbatches, recipe.comm_scale,
                               experts, _draw_attention(context_rng, recipe.comm_scale)
                               if has_context else None)
                   for index, experts in enumerate(recipe.moe_layers))
    if recipe.identical_blocks:
        layers = tuple(Layer(layer.name, layers[_block_of(index, len(layers))].profiles)
                       for index, layer in enumerate(layers))
    network = NETWORK_BUILDERS[recipe.network][0](rng, recipe.num_devices)
    optimizer = Optimizer(2, 2, 12)
    if recipe.v3:
        network = _with_efficiencies(network, recipe.v3["efficiencies"])
        optimizer = Optimizer(*recipe.v3["optimizer"])
    state = sum(layer.profile(IntraConfig(), microbatches[0]).params * 16
                + layer.profile(IntraConfig(), microbatches[0]).act_bytes for layer in layers)
    hbm_bytes = max(10**6, int(state * recipe.memory_scale))
    extra = {}
    if recipe.sdp:
        layers = _maskable(layers, recipe.sdp)
        sdp = recipe.sdp
        extra = {"strategies": (Strategy.DP, Strategy.SDP), "sdp": SdpSetup(
            levels=tuple(SdpLevel(level) for level in sdp["levels"]),
            maskings=tuple(SdpMasking(masking) for masking in sdp["maskings"]),
            holders=tuple(sdp["holders"]))}
    # a sequence Megatron may split over every width (a multiple of 2c; it changes no price)
    seq_len = 64 if has_context else 1
    training = TrainingSetup(seq_len=seq_len, optimizer=optimizer, **recipe.training, **extra)
    cluster = Cluster(recipe.num_devices, hbm_bytes, network, name=f"tiny-{recipe.seed}")
    return Instance(Workload(f"tiny-{recipe.seed}", layers), cluster, training,
                    name=f"tiny-{recipe.seed}")


def _with_efficiencies(network, efficiencies: list[float]):
    """The network with tier (or link) i at ``efficiencies[i % len]`` of its bandwidth."""
    if isinstance(network, HierarchicalNetwork):
        return HierarchicalNetwork(tuple(
            dataclasses.replace(tier, efficiency=efficiencies[index % len(efficiencies)])
            for index, tier in enumerate(network.tiers)))
    return dataclasses.replace(network, links=tuple(
        dataclasses.replace(link, efficiency=efficiencies[index % len(efficiencies)])
        for index, link in enumerate(network.links)))


def _maskable(layers: tuple[Layer, ...], sdp: dict) -> tuple[Layer, ...]:
    """The layers with SDP width slices on all but the first and last (all of one or two)."""
    inner = range(1, len(layers) - 1) if len(layers) >= 3 else range(len(layers))
    return tuple(_sliced(layer, sdp["units"][index], sdp["fractions"][index])
                 if index in inner else layer for index, layer in enumerate(layers))


def _sliced(layer: Layer, units: int, fraction: float, halve_wgrad: bool = False) -> Layer:
    """The layer with ``units`` SDP width slices carrying ``fraction`` of every profile
    (DESIGN §7); ``halve_wgrad`` also sets each weight gradient to half the backward."""
    def sliced(profile: LayerProfile) -> LayerProfile:
        fields = {"wgrad_s": round(profile.bwd_s / 2, 9)} if halve_wgrad else {}
        return dataclasses.replace(profile, sdp_units=units, sdp_fraction=fraction, **fields)
    return Layer(layer.name, {key: sliced(profile) for key, profile in layer.profiles.items()})


def _draw_attention(rng: random.Random, comm_scale: int) -> tuple[float, int] | None:
    """A layer's attention core: (its share of the compute, the K/V bytes of a whole
    microbatch at t = 1), or None for a layer without attention."""
    if rng.random() < 0.2:
        return None
    return rng.choice((0.25, 0.5)), rng.choice((1, 5, 20)) * 10**7 * comm_scale


def _tiny_layer(rng: random.Random, index: int, configs, microbatches, comm_scale: int,
                experts: bool, attention: tuple[float, int] | None = None) -> Layer:
    """A transformer-shaped layer; with experts its expert parameters split over ep and its
    tokens cross an all-to-all.  Also carries the optional v2 profile fields (weight-gradient
    time, selective recompute, forward FLOPs), which the cost model uses once it prices them.
    At a context width c every token-proportional figure is 1/c of the whole's and the
    attention core (``attention``: its share, the K/V bytes) gets its times and volumes."""
    fwd_ms = rng.choice((0.2, 0.5, 1.0, 1.5, 3.0))
    params = rng.choice((1, 2, 3, 5)) * 10**8
    act = rng.choice((1, 2, 4, 8)) * 10**9
    out = rng.choice((1, 2, 4)) * 10**6 * comm_scale
    profiles = {}
    for config in configs:
        cp = config.cp
        for microbatch in microbatches:
            base = _profile(fwd_ms / cp, params, act // cp, out // cp, experts,
                            IntraConfig(config.tp, config.ep), microbatch)
            profile = dataclasses.replace(
                base, wgrad_s=round(base.bwd_s / 2, 12), sel_fwd_s=round(base.fwd_s * 0.3, 12),
                sel_act_bytes=base.act_bytes * 2 // 5,
                flops=float(2 * (base.dense_params + base.expert_params) * microbatch) / cp)
            if cp > 1 and attention is not None:
                share, kv = attention
                profile = dataclasses.replace(
                    profile, attn_fwd_s=round(base.fwd_s * share, 12),
                    attn_bwd_s=round(base.bwd_s * share, 12),
                    cp_kv_bytes=kv * microbatch // (cp * config.tp),
                    cp_a2a_bytes=2 * kv * microbatch // (cp * config.tp))
            profiles[(config, microbatch)] = profile
    return Layer(f"layer{index}", profiles)


def _tiny_hierarchy(rng: random.Random, num_devices: int) -> HierarchicalNetwork:
    """1-3 tiers, inner sizes 1, 2 or 4, the outer tier covering the rest (domains may be
    partial); bandwidth usually falls outwards but need not."""
    inner = [rng.choice((1, 2, 2, 4)) for _ in range(rng.randint(0, 2))]
    covered = math.prod(inner)
    sizes = [*inner, -(-num_devices // covered)]
    tiers, bandwidth, latency = [], rng.choice((5e10, 1e11)), rng.choice((1e-6, 2e-6))
    for index, size in enumerate(sizes):
        tiers.append(Tier(f"tier{index}", size, bandwidth, latency))
        bandwidth = bandwidth / rng.choice((0.5, 1, 2, 4, 10))
        latency = latency * rng.choice((1, 2, 5, 10))
    return HierarchicalNetwork(tuple(tiers))


def _tiny_uneven_hierarchy(rng: random.Random, num_devices: int) -> HierarchicalNetwork:
    """2-4 tiers: inner sizes 1, 2 or 3, the outer tier covering the rest (domains may be
    partial, the outer tier may have size 1), sometimes one more top tier of size 1; each
    tier's bandwidth from 1/100 to 4 times the one below (outer tiers may be faster)."""
    inner = [rng.choice((1, 2, 2, 3)) for _ in range(rng.randint(1, 2))]
    covered = math.prod(inner)
    sizes = [*inner, -(-num_devices // covered)] + ([1] if rng.random() < 0.2 else [])
    tiers, bandwidth, latency = [], rng.choice((5e10, 1e11)), rng.choice((1e-6, 5e-6))
    for index, size in enumerate(sizes):
        tiers.append(Tier(f"tier{index}", size, bandwidth, latency))
        bandwidth = bandwidth / rng.choice((0.25, 0.5, 1, 2, 10, 100))
        latency = latency * rng.choice((0.5, 1, 2, 10))
    return HierarchicalNetwork(tuple(tiers))


def _tiny_switched(rng: random.Random, num_devices: int) -> GraphNetwork:
    """Leaf switches of 2-4 devices under one spine, uplinks oversubscribed or not; one
    device pair sometimes gets a direct link, and a leaf a second, parallel uplink."""
    group = rng.choice((2, 3, 4))
    leaves = [f"leaf{index}" for index in range(-(-num_devices // group))]
    links = [Link(device, leaves[device // group], 1e11, 1e-6) for device in range(num_devices)]
    links += [Link(leaf, "spine", rng.choice((1e10, 2.5e10, 1e11)), rng.choice((2e-6, 5e-6)))
              for leaf in leaves]
    if rng.random() < 0.3:
        links.append(Link(leaves[0], "spine", rng.choice((5e9, 2e11)), rng.choice((1e-7, 1e-5))))
    if rng.random() < 0.3 and num_devices > 2:
        a, b = rng.sample(range(num_devices), 2)
        links.append(Link(a, b, rng.choice((2e10, 2e11)), rng.choice((5e-7, 3e-6))))
    return GraphNetwork((*leaves, "spine"), tuple(links))


def _tiny_ring(rng: random.Random, num_devices: int) -> GraphNetwork:
    """A ring of direct links, one of them sometimes slow, sometimes doubled by a parallel
    link of other speed."""
    links = [Link(device, (device + 1) % num_devices, rng.choice((5e10, 1e11)),
                  rng.choice((1e-6, 2e-6))) for device in range(num_devices)
             if num_devices > 2 or device == 0]
    if rng.random() < 0.4:
        slow = rng.randrange(len(links))
        links[slow] = dataclasses.replace(links[slow], bandwidth_Bps=5e9)
    if rng.random() < 0.3:
        first = links[0]
        links.append(Link(first.a, first.b, first.bandwidth_Bps / 2, first.latency_s / 10))
    return GraphNetwork((), tuple(links))


def _tiny_random_graph(rng: random.Random, num_devices: int) -> GraphNetwork:
    return _random_graph(rng, num_devices)


# network kind -> (builder (rng, num_devices) -> network, weight of the kind in the draw):
# hierarchies are drawn as often as all graph kinds together
NETWORK_BUILDERS: dict[str, tuple[Callable[[random.Random, int], HierarchicalNetwork |
                                           GraphNetwork], int]] = {
    "hierarchy": (_tiny_hierarchy, 3),
    "graph-switched": (_tiny_switched, 1),
    "graph-ring": (_tiny_ring, 1),
    "graph-random": (_tiny_random_graph, 1),
    "hierarchy-uneven": (_tiny_uneven_hierarchy, 0),  # the certify draw's (_certify_recipe)
}


def random_sdp_instance(seed: int, num_blocks: int = 2, units: int = 2,
                        tier_sizes: tuple[int, ...] = (2, 2),
                        levels: tuple[SdpLevel, ...] = (SdpLevel.BLOCK,),
                        maskings: tuple[SdpMasking, ...] = (SdpMasking.FORWARD,),
                        holders: tuple[int, ...] = (),
                        strategies: tuple[Strategy, ...] = (Strategy.DP, Strategy.SDP),
                        **options) -> Instance:
    """A :func:`random_instance` of ``num_blocks`` maskable blocks between an embedding and a
    head, for SDP (DESIGN §7): each block has ``units`` width slices carrying a random
    fraction of it, and every profile a weight gradient of half its backward.
    ``options`` are passed on to :func:`random_instance`."""
    rng = random.Random(seed)
    base = random_instance(seed, num_layers=num_blocks + 2, tier_sizes=tier_sizes, **options)
    layers = []
    for index, layer in enumerate(base.workload.layers):
        maskable = 0 < index <= num_blocks
        fraction = rng.choice((0.75, 0.9, 1.0))
        layers.append(_sliced(layer, units if maskable else 0, fraction if maskable else 0.0,
                              halve_wgrad=True))
    training = dataclasses.replace(base.training, strategies=strategies, sdp=SdpSetup(
        levels=levels, maskings=maskings, holders=holders))
    return Instance(Workload(base.workload.name, tuple(layers)), base.cluster, training,
                    name=f"{base.name}-sdp")


def random_cp_instance(seed: int, configs: tuple[IntraConfig, ...], num_layers: int = 3,
                       tier_sizes: tuple[int, ...] = (2, 2), cp_comm: str = "p2p",
                       zero_stages: tuple[int, ...] = (0, 1),
                       recompute_modes: tuple[RecomputeMode, ...] = (
                           RecomputeMode.NONE, RecomputeMode.FULL),
                       virtual_stages: tuple[int, ...] = (1,), global_batch: int = 8,
                       hbm_bytes: int = 40 * _GB, comm_scale: int = 1,
                       identical_blocks: bool = False, graph: bool = False,
                       launcher: Launcher = Launcher.NONE) -> Instance:
    """A random instance allowing context parallelism (docs/context-parallelism.md) with
    the context widths of ``configs``, on a hierarchical network of ``tier_sizes`` (or, with
    ``graph``, a random graph of as many devices).

    Each layer is :func:`random_instance`'s, profiled at every configuration as the
    profiler splits a sequence over c ranks: token-proportional figures (compute,
    activations, checkpoints, outputs, collective volumes) divided by c, an attention core
    (a random share of compute, whose FLOPs fall by c as the rest does) with K/V and
    all-to-all payloads of random size, some layers without attention.
    """
    rng = random.Random(seed)
    num_devices = math.prod(tier_sizes)
    layers = []
    for index in range(num_layers):
        fwd_ms = rng.choice((0.5, 1.0, 2.0))
        params = rng.choice((1, 2, 3)) * 2 * 10**8
        act = rng.choice((2, 4, 8)) * 10**9
        out = rng.choice((1, 2, 4)) * 10**6 * comm_scale
        experts = rng.random() < 0.3
        attention = rng.random() < 0.8
        share = rng.choice((0.25, 0.5))
        kv = rng.choice((1, 5, 20)) * 10**7 * comm_scale if attention else 0
        profiles = {}
        for config in configs:
            base = _profile(fwd_ms / config.cp, params, act // config.cp, out // config.cp,
                            experts, IntraConfig(config.tp, config.ep), 1)
            profiles[(config, 1)] = dataclasses.replace(
                base, attn_fwd_s=round(base.fwd_s * share, 9) if attention else None,
                attn_bwd_s=round(base.bwd_s * share, 9) if attention else None,
                cp_kv_bytes=kv // (config.cp * config.tp) if config.cp > 1 else 0,
                cp_a2a_bytes=2 * kv // (config.cp * config.tp) if config.cp > 1 else 0)
        layers.append(Layer(f"layer{index}", profiles))
    if identical_blocks and num_layers >= 3:
        layers = [layers[0], *(Layer(f"block{index}", layers[1].profiles)
                               for index in range(1, num_layers - 1)), layers[-1]]
    network = _random_graph(rng, num_devices) if graph else _hierarchy(rng, tier_sizes)
    cluster = Cluster(num_devices, hbm_bytes, network, name=f"cp-{seed}")
    widths = tuple(sorted({config.cp for config in configs}))
    training = TrainingSetup(global_batch=global_batch, seq_len=64, microbatches=(1,),
                             optimizer=Optimizer(2, 2, 12), zero_stages=zero_stages,
                             recompute_modes=recompute_modes, virtual_stages=virtual_stages,
                             context_parallel=widths, cp_comm=CpComm(cp_comm), launcher=launcher)
    return Instance(Workload(f"cp-{seed}", tuple(layers), heads=8, kv_heads=8), cluster,
                    training, name=f"cp-{seed}-L{num_layers}-N{num_devices}")
