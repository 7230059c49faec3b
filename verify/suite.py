"""Deterministic generator of the benchmark instances in ``instances/``.

``python -m nest_cp.verify.suite [ROOT]`` (re)writes ``ROOT/small/*.json`` (hand-made
synthetic instances small enough for the exact solvers to certify) and
``ROOT/paper/*.json`` (the NEST grid: five preset models x two clusters x five
sizes, written as preset references) and ``ROOT/paper-v2/*.json`` (the same grid with the
v2 choices of DESIGN §3.2 open).  Every number of a small instance comes
from :func:`synthetic_layer` and the specification tables below; the folder
READMEs explain them.  Nothing is random, so regenerating gives identical files.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

LOGGER = logging.getLogger(__name__)

# Network constants of the small set (bandwidth in bytes/s, latency in seconds).
NVLINK_BPS, NVLINK_LATENCY_S = 1e11, 1e-6       # node-internal link, ~100 GB/s
RACK_BPS, RACK_LATENCY_S = 2.5e10, 3e-6          # 200 Gb/s NIC
SPINE_BPS, SPINE_LATENCY_S = 1.25e10, 5e-6       # 100 Gb/s NIC
SLOW_BPS, SLOW_LATENCY_S = 1e9, 2e-5             # a thin inter-island link
POD_BPS = 2.5e9                                  # a 20 Gb/s per-device inter-pod share


# ------------------------------------------------------------------ layer profiles


@dataclass(frozen=True)
class LayerSpec:
    """One synthetic layer at tp = 1, microbatch 1, before the configuration scaling."""

    name: str
    fwd_ms: float          # forward time of one sample on one device
    dense_params: int      # parameters replicated across expert ranks, split by tp
    act_bytes: int         # activation bytes kept for backward per sample (tp = 1)
    out_bytes: int         # hidden-state bytes of one sample leaving the layer
    expert_params: int = 0  # parameters of all experts, split across ep ranks
    repeat: int = 1
    sdp_units: int = 0      # SDP (DESIGN §7): width slices of a maskable block (0: shared)
    sdp_fraction: float = 0.0  # the share of the block those slices carry
    # selective recomputation (DESIGN §3.2 a): the share of the forward the attention core
    # takes (recomputed) and the share of act_bytes kept; None: the profile has no such fields
    selective: tuple[float, float] | None = None


def synthetic_layer(spec: LayerSpec, tp: int, ep: int, microbatch: int) -> dict:
    """The profile of ``spec`` under (tp, ep) and microbatch size, as an instance-file dict.

    Compute scales with samples and splits over tp with 10% overhead per extra tensor
    rank; backward costs twice forward (data + weight gradients, the usual 2x rule);
    dense parameters and activations split over tp; expert parameters split over ep;
    recomputation keeps only the layer input (``out_bytes`` per sample); with
    ``spec.selective = (r, k)`` selective recomputation reruns the share r of the forward
    (``sel_fwd_s``) and keeps the share k of the activations (``sel_act_bytes``).  A tensor-
    parallel layer all-reduces its output twice in forward and twice in backward
    (Megatron-LM's attention + MLP pattern); a layer with experts does two
    all-to-alls (dispatch, combine) in each direction over the ep ranks.
    """
    fwd_s = round(spec.fwd_ms * 1e-3 * microbatch / tp * (1 + 0.1 * (tp - 1)), 9)
    out_bytes = spec.out_bytes * microbatch
    collectives = []
    if tp > 1:
        collectives += [_collective("all_reduce", out_bytes, "tp", phase)
                        for phase in ("fwd", "fwd", "bwd", "bwd")]
    if spec.expert_params and ep > 1:
        collectives += [_collective("all_to_all", out_bytes, "ep", phase)
                        for phase in ("fwd", "fwd", "bwd", "bwd")]
    profile = {"tp": tp, "ep": ep, "microbatch": microbatch, "fwd_s": fwd_s,
               "bwd_s": round(2 * fwd_s, 9), "dense_params": spec.dense_params // tp,
               "expert_params": spec.expert_params // ep,
               "act_bytes": spec.act_bytes * microbatch // tp, "ckpt_bytes": out_bytes,
               "out_bytes": out_bytes, "collectives": collectives}
    if spec.sdp_units:  # the weight gradient is half the backward (the 2x rule's other half)
        profile.update(wgrad_s=fwd_s, sdp_units=spec.sdp_units, sdp_fraction=spec.sdp_fraction)
    if spec.selective is not None:  # the attention core: recomputed forward, activations kept
        recomputed, kept = spec.selective
        profile.update(sel_fwd_s=round(fwd_s * recomputed, 9),
                       sel_act_bytes=int(profile["act_bytes"] * kept))
    return profile


def _collective(kind: str, volume_bytes: int, group: str, phase: str) -> dict:
    return {"kind": kind, "volume_bytes": volume_bytes, "group": group, "phase": phase}


def workload_dict(name: str, layers: list[LayerSpec], configs: list[tuple[int, int]],
                  microbatches: list[int]) -> dict:
    """A workload section with every layer profiled for every (tp, ep) and microbatch."""
    return {"name": name, "layers": [
        {"name": spec.name, "repeat": spec.repeat,
         "profiles": [synthetic_layer(spec, tp, ep, size)
                      for tp, ep in configs for size in microbatches]}
        for spec in layers]}


def dense_chain(blocks: int, scale: float = 1.0) -> list[LayerSpec]:
    """Embedding, ``blocks`` transformer-like blocks of slowly growing cost, head."""
    def block(index: int) -> LayerSpec:
        return LayerSpec(f"block{index}", fwd_ms=round((1.0 + 0.25 * index) * scale, 3),
                         dense_params=int(2e8 * scale), act_bytes=int(2e9 * scale),
                         out_bytes=int(8e6 * scale))
    return [LayerSpec("embed", fwd_ms=round(0.2 * scale, 3), dense_params=int(3e8 * scale),
                      act_bytes=int(2e8 * scale), out_bytes=int(8e6 * scale)),
            *[block(index) for index in range(blocks)],
            LayerSpec("head", fwd_ms=round(0.6 * scale, 3), dense_params=int(3e8 * scale),
                      act_bytes=int(1e9 * scale), out_bytes=int(4e6 * scale))]


def moe_chain(blocks: int, scale: float = 1.0) -> list[LayerSpec]:
    """Like :func:`dense_chain`, with every block carrying experts (8 experts of 1e8 params)."""
    def block(index: int) -> LayerSpec:
        return LayerSpec(f"moe{index}", fwd_ms=round((1.2 + 0.2 * index) * scale, 3),
                         dense_params=int(1e8 * scale), act_bytes=int(3e9 * scale),
                         out_bytes=int(8e6 * scale), expert_params=int(8e8 * scale))
    chain = dense_chain(0, scale)
    return [chain[0], *[block(index) for index in range(blocks)], chain[-1]]


# ------------------------------------------------------------------ networks


def hierarchical(*tiers: tuple[str, int, float, float]) -> dict:
    return {"kind": "hierarchical", "tiers": [
        {"name": name, "size": size, "bandwidth_Bps": bandwidth, "latency_s": latency}
        for name, size, bandwidth, latency in tiers]}


def two_tier(node: int, nodes: int, spine_bps: float = SPINE_BPS) -> dict:
    return hierarchical(("node", node, NVLINK_BPS, NVLINK_LATENCY_S),
                        ("spine", nodes, spine_bps, SPINE_LATENCY_S))


def three_tier(node: int, racks: int, pods: int) -> dict:
    return hierarchical(("node", node, NVLINK_BPS, NVLINK_LATENCY_S),
                        ("rack", racks, RACK_BPS, RACK_LATENCY_S),
                        ("pod", pods, SPINE_BPS, SPINE_LATENCY_S))


def _link(a: int | str, b: int | str, bandwidth: float, latency: float) -> dict:
    return {"a": a, "b": b, "bandwidth_Bps": bandwidth, "latency_s": latency}


def oversubscribed_tree(leaves: int, per_leaf: int) -> dict:
    """Devices on leaf switches at rack speed; leaf uplinks 4:1 oversubscribed.

    The widest-path model prices a pair by its bottleneck link, not by sharing, so
    the uplink carries the per-device share of a 4:1 oversubscribed uplink
    (rack bandwidth / 4), the convention DESIGN §1.2 uses for outer tiers.
    """
    links = [_link(leaf * per_leaf + slot, f"leaf{leaf}", RACK_BPS, RACK_LATENCY_S)
             for leaf in range(leaves) for slot in range(per_leaf)]
    links += [_link(f"leaf{leaf}", "spine", RACK_BPS / 4,
                    SPINE_LATENCY_S) for leaf in range(leaves)]
    return {"kind": "graph", "switches": [f"leaf{leaf}" for leaf in range(leaves)] + ["spine"],
            "links": links}


def ring(devices: int, slow_link: bool) -> dict:
    """Devices in a ring of NVLink-class links; optionally the link (last, 0) is 10x slower."""
    links = [_link(device, (device + 1) % devices, NVLINK_BPS, NVLINK_LATENCY_S)
             for device in range(devices)]
    if slow_link:
        links[-1] = _link(devices - 1, 0, NVLINK_BPS / 10, 10 * NVLINK_LATENCY_S)
    return {"kind": "graph", "switches": [], "links": links}


def two_islands(per_island: int) -> dict:
    """Two switched islands of ``per_island`` devices joined by one thin link."""
    links = [_link(island * per_island + slot, f"island{island}", NVLINK_BPS / 2,
                   NVLINK_LATENCY_S)
             for island in range(2) for slot in range(per_island)]
    links.append(_link("island0", "island1", SLOW_BPS, SLOW_LATENCY_S))
    return {"kind": "graph", "switches": ["island0", "island1"], "links": links}


def torus_slice(rows: int, cols: int) -> dict:
    """A rows x cols slice of a 2D torus: fast links along rows, slower along columns."""
    links = []
    for row in range(rows):
        for col in range(cols):
            device = row * cols + col
            if cols > 1 and (col + 1 < cols or cols > 2):
                links.append(_link(device, row * cols + (col + 1) % cols, NVLINK_BPS / 2,
                                   NVLINK_LATENCY_S))
            if rows > 1 and (row + 1 < rows or rows > 2):
                links.append(_link(device, ((row + 1) % rows) * cols + col, RACK_BPS,
                                   RACK_LATENCY_S))
    return {"kind": "graph", "switches": [], "links": links}


# ------------------------------------------------------------------ the small set


@dataclass(frozen=True)
class SmallSpec:
    """One small instance: its family, chain, choices, network and memory."""

    name: str
    family: str
    purpose: str
    layers: list[LayerSpec]
    devices: int
    network: dict
    hbm_bytes: int
    global_batch: int = 8
    configs: list[tuple[int, int]] = field(default_factory=lambda: [(1, 1)])
    microbatches: list[int] = field(default_factory=lambda: [1])
    zero_stages: list[int] = field(default_factory=lambda: [0])
    allow_recompute: bool = False
    sdp: dict | None = None  # training.sdp (DESIGN §7); given: strategies dp and sdp
    strategies: list[str] = field(default_factory=lambda: ["dp"])
    # v2 choices (DESIGN §3.2), written only when given: the allowed recompute modes (in
    # place of allow_recompute), virtual-stage counts and overlapped gradient reduction
    recompute: list[str] | None = None
    virtual_stages: list[int] | None = None
    overlap_grad_reduce: bool | None = None
    provenance: str | None = None  # measured facts of the instance, for its provenance


GB = 10**9
# Memory-tight HBM sizes sit strictly between the smallest capacity at which any plan fits
# and the smallest at which the loose optimum fits (found by bisection with the DP; see
# instances/small/README.md), so memory changes the optimum on those instances.


def small_specs() -> list[SmallSpec]:
    """Every small instance, in a fixed order."""
    return [*_hierarchical_specs(), *_moe_specs(), *_tight_specs(), *_graph_specs(),
            *_infeasible_specs(), *_sdp_specs(), *_v2_specs()]


def _hierarchical_specs() -> list[SmallSpec]:
    return [
        SmallSpec("h2-dense-l3-d4", "hier2", "3 layers on 2 nodes of 2; placement matters",
                  dense_chain(1), 4, two_tier(2, 2), 80 * GB),
        SmallSpec("h2-dense-l4-d4-mb", "hier2", "microbatch choice 1 or 2",
                  dense_chain(2), 4, two_tier(2, 2), 80 * GB, microbatches=[1, 2]),
        SmallSpec("h2-dense-l4-d8", "hier2", "4 layers on 2 nodes of 4",
                  dense_chain(2), 8, two_tier(4, 2), 80 * GB, global_batch=16),
        SmallSpec("h2-dense-l5-d8-tp", "hier2", "tensor width 1 or 2",
                  dense_chain(3), 8, two_tier(4, 2), 80 * GB, configs=[(1, 1), (2, 1)]),
        SmallSpec("h2-dense-l4-d6-zero", "hier2", "ZeRO 0-3 on a non-power-of-two cluster",
                  dense_chain(2), 6, two_tier(2, 3), 80 * GB, global_batch=12,
                  zero_stages=[0, 1, 2, 3]),
        SmallSpec("h2-dense-l5-d8-slowspine", "hier2", "a 10x slower spine",
                  dense_chain(3), 8, two_tier(2, 4, SPINE_BPS / 10), 80 * GB, global_batch=16),
        SmallSpec("h2-dense-l8-d16", "hier2", "the largest small instance: 8 layers, 16 devices",
                  dense_chain(6, 0.5), 16, two_tier(4, 4), 80 * GB, global_batch=32),
        SmallSpec("h3-dense-l4-d8", "hier3", "3 tiers of 2",
                  dense_chain(2), 8, three_tier(2, 2, 2), 80 * GB, global_batch=16),
        SmallSpec("h3-dense-l5-d8-tp-mb", "hier3", "tp 1/2 and microbatch 1/2 on 3 tiers",
                  dense_chain(3), 8, three_tier(2, 2, 2), 80 * GB, global_batch=16,
                  configs=[(1, 1), (2, 1)], microbatches=[1, 2]),
        SmallSpec("h3-dense-l3-d8-recompute", "hier3", "recomputation allowed, loose memory",
                  dense_chain(1), 8, three_tier(2, 2, 2), 80 * GB, global_batch=16,
                  allow_recompute=True),
        SmallSpec("h3-dense-l6-d12", "hier3", "3 tiers 2 x 3 x 2, 6 layers",
                  dense_chain(4, 0.5), 12, three_tier(2, 3, 2), 80 * GB, global_batch=24),
    ]


def _moe_specs() -> list[SmallSpec]:
    return [
        SmallSpec("moe-l3-d4-ep2", "moe", "expert width 1 or 2, all-to-all in tier 0",
                  moe_chain(1), 4, two_tier(2, 2), 80 * GB, configs=[(1, 1), (1, 2)]),
        SmallSpec("moe-l4-d8-ep2", "moe", "two MoE blocks, ep 1/2",
                  moe_chain(2), 8, two_tier(4, 2), 80 * GB, global_batch=16,
                  configs=[(1, 1), (1, 2)]),
        SmallSpec("moe-l4-d8-tp-ep", "moe", "tp x ep in {1x1, 2x1, 1x2, 2x2}",
                  moe_chain(2), 8, two_tier(4, 2), 80 * GB, global_batch=16,
                  configs=[(1, 1), (2, 1), (1, 2), (2, 2)]),
        SmallSpec("moe-l3-d8-h3-ep4", "moe", "ep 4 across 3 tiers",
                  moe_chain(1), 8, three_tier(2, 2, 2), 80 * GB, global_batch=16,
                  configs=[(1, 1), (1, 4)]),
        SmallSpec("moe-l4-d8-tight", "moe", "experts only fit when sharded or pipelined",
                  moe_chain(2), 8, two_tier(4, 2), 9 * GB, global_batch=16,
                  configs=[(1, 1), (1, 2)], zero_stages=[0, 1, 2, 3], allow_recompute=True),
    ]


def _tight_specs() -> list[SmallSpec]:
    return [
        SmallSpec("tight-l3-d4-recompute", "tight", "fits only with recomputation or pipelining",
                  dense_chain(1), 4, two_tier(2, 2), 8 * GB, allow_recompute=True),
        SmallSpec("tight-l4-d4-zero", "tight", "fits only with ZeRO or a deep pipeline",
                  dense_chain(2), 4, two_tier(2, 2), 86 * GB // 10, zero_stages=[0, 1, 2, 3]),
        SmallSpec("tight-l5-d8-all", "tight", "recompute, ZeRO, tp and microbatch all open",
                  dense_chain(3), 8, two_tier(4, 2), 6 * GB, global_batch=16,
                  configs=[(1, 1), (2, 1)], microbatches=[1, 2], zero_stages=[0, 3],
                  allow_recompute=True),
        SmallSpec("tight-l8-d16-h3", "tight", "8 layers, 16 devices, every choice open, tight",
                  dense_chain(6, 0.5), 16, three_tier(2, 2, 4), 25 * GB // 10, global_batch=32,
                  configs=[(1, 1), (2, 1)], microbatches=[1, 2], zero_stages=[0, 1, 2, 3],
                  allow_recompute=True),
        SmallSpec("tight-l4-d8-h3", "tight", "tight memory on 3 tiers",
                  dense_chain(2), 8, three_tier(2, 2, 2), 6 * GB, global_batch=16,
                  zero_stages=[0, 2], allow_recompute=True),
    ]


def _graph_specs() -> list[SmallSpec]:
    return [
        SmallSpec("graph-tree-dense-l4-d8", "graph-tree", "2 leaves of 4, 4:1 oversubscribed",
                  dense_chain(2), 8, oversubscribed_tree(2, 4), 80 * GB, global_batch=16),
        SmallSpec("graph-tree-moe-l3-d8", "graph-tree", "MoE on the oversubscribed tree",
                  moe_chain(1), 8, oversubscribed_tree(2, 4), 80 * GB, global_batch=16,
                  configs=[(1, 1), (1, 2)]),
        SmallSpec("graph-ring-dense-l4-d6", "graph-ring", "ring of 6 with one slow link",
                  dense_chain(2), 6, ring(6, True), 80 * GB, global_batch=12),
        SmallSpec("graph-ring-dense-l3-d4-tp", "graph-ring", "uniform ring of 4, tp 1/2",
                  dense_chain(1), 4, ring(4, False), 80 * GB, configs=[(1, 1), (2, 1)]),
        SmallSpec("graph-islands-dense-l4-d8", "graph-islands", "two islands of 4, thin bridge",
                  dense_chain(2), 8, two_islands(4), 80 * GB, global_batch=16),
        SmallSpec("graph-islands-tight-l4-d8", "graph-islands", "islands with tight memory",
                  dense_chain(2), 8, two_islands(4), 6 * GB, global_batch=16,
                  zero_stages=[0, 1], allow_recompute=True),
        SmallSpec("graph-torus-dense-l4-d8", "graph-torus", "2 x 4 torus slice",
                  dense_chain(2), 8, torus_slice(2, 4), 80 * GB, global_batch=16),
        SmallSpec("graph-torus-moe-l3-d8", "graph-torus", "MoE ep 2 on a 2 x 4 torus slice",
                  moe_chain(1), 8, torus_slice(2, 4), 80 * GB, global_batch=16,
                  configs=[(1, 1), (1, 2)]),
        SmallSpec("graph-torus-moe-l6-d16", "graph-torus",
                  "4 x 4 torus, MoE, tp x ep and microbatch open: exact solvers hit the limit",
                  moe_chain(4, 0.5), 16, torus_slice(4, 4), 80 * GB, global_batch=32,
                  configs=[(1, 1), (2, 1), (1, 2), (2, 2)], microbatches=[1, 2]),
    ]


def _infeasible_specs() -> list[SmallSpec]:
    huge_act = [LayerSpec("embed", 0.2, int(1e8), int(2e8), int(8e6)),
                LayerSpec("wide", 1.0, int(1e8), int(50e9), int(8e6)),
                LayerSpec("head", 0.5, int(1e8), int(1e9), int(4e6))]
    huge_params = [LayerSpec("embed", 0.2, int(3e9), int(2e8), int(8e6)),
                   LayerSpec("block", 1.0, int(1e8), int(1e9), int(8e6))]
    return [
        SmallSpec("infeasible-activation", "infeasible",
                  "one layer keeps 50 GB of activations; HBM 40 GB; recompute cannot help",
                  huge_act, 4, two_tier(2, 2), 40 * GB, allow_recompute=True),
        SmallSpec("infeasible-params", "infeasible",
                  "3e9 parameters x 16 B exceed 40 GB; ZeRO not allowed, tp 1 only",
                  huge_params, 4, two_tier(2, 2), 40 * GB, allow_recompute=True),
        SmallSpec("infeasible-experts", "infeasible",
                  "experts 8e9 params; ep 2 halves them, still over 40 GB even with ZeRO 1",
                  [LayerSpec("moe", 1.0, int(1e8), int(1e9), int(8e6),
                             expert_params=int(8e9))], 4, two_tier(2, 2), 40 * GB,
                  configs=[(1, 1), (1, 2)], zero_stages=[0, 1]),
    ]


def maskable(chain: list[LayerSpec], units: int = 1, fraction: float = 1.0) -> list[LayerSpec]:
    """The chain with every block (all layers but the first and the last) maskable by SDP."""
    return [chain[0], *(replace(block, sdp_units=units, sdp_fraction=fraction)
                        for block in chain[1:-1]), chain[-1]]


def _sdp_specs() -> list[SmallSpec]:
    """SDP instances (DESIGN §7): both levels and maskings, one where only SDP fits, one
    where the holder groups must stay off a slow tier."""
    both = ["forward", "backward"]
    heavy = [LayerSpec("embed", 0.2, int(3e8), int(6e9), int(8e6)),
             *[LayerSpec(f"block{index}", 1.0 + 0.25 * index, int(1e9), int(2e9), int(8e6),
                         sdp_units=1, sdp_fraction=1.0) for index in range(4)],
             LayerSpec("head", 0.6, int(3e8), int(1e9), int(4e6))]
    light_ends = [replace(layer, dense_params=int(1e7)) if not layer.sdp_units else
                  replace(layer, dense_params=int(1e9)) for layer in maskable(dense_chain(4))]
    return [
        SmallSpec("sdp-block-l4-d4", "sdp", "SDP block level, forward and backward masking",
                  maskable(dense_chain(2)), 4, two_tier(2, 2), 80 * GB,
                  sdp={"levels": ["block"], "maskings": both}),
        SmallSpec("sdp-neuron-l4-d4", "sdp", "SDP neuron level (4 slices of 90 % per block)",
                  maskable(dense_chain(2), 4, 0.9), 4, two_tier(2, 2), 80 * GB,
                  sdp={"levels": ["neuron"], "maskings": both, "holders": [1, 2]}),
        SmallSpec("sdp-only-l6-d4", "sdp", "no plain plan fits 36 GB; SDP with C = 1/4 does",
                  heavy, 4, two_tier(2, 2), 36 * GB,
                  sdp={"levels": ["block"], "maskings": ["forward"]}),
        SmallSpec("sdp-slowtier-l6-d8", "sdp", "holder pairs must stay off the slow pod tier",
                  light_ends, 8, hierarchical(
                      ("node", 2, NVLINK_BPS, NVLINK_LATENCY_S),
                      ("rack", 2, RACK_BPS, RACK_LATENCY_S),
                      ("pod", 2, POD_BPS, SLOW_LATENCY_S)), 80 * GB, global_batch=32,
                  configs=[(1, 1), (2, 1)],
                  sdp={"levels": ["block"], "maskings": ["forward"], "holders": [2]}),
    ]


def selective(chain: list[LayerSpec], recomputed: float = 0.1,
              kept: float = 0.3) -> list[LayerSpec]:
    """The chain with selective-recomputation fields: each block's attention core takes the
    share ``recomputed`` of its forward and holds the share ``1 - kept`` of its activations
    (Korthikanti et al. 2022); the first and last layers have no attention core (nothing
    recomputed, every activation kept)."""
    return [replace(layer, selective=(0.0, 1.0)) if index in (0, len(chain) - 1) else
            replace(layer, selective=(recomputed, kept)) for index, layer in enumerate(chain)]


def _v2_specs() -> list[SmallSpec]:
    """One instance per DESIGN §3.2 choice that decides its optimum: interleaving (v = 2),
    selective recomputation, overlapped gradient reduction and the ZeRO-3 gather buffers.
    The ``provenance`` texts state what the DP measured on the instance and on its
    variants without the choice (``nest-cp solve FILE --backend dp --json``)."""
    heavy_blocks = [LayerSpec(f"block{index}", 1.0, int(1e9), int(2e9), int(8e6))
                    for index in range(6)]
    return [
        SmallSpec("v2-interleave-l6-d4", "v2",
                  "interleaved 1F1B: v = 2 is the optimum (virtual stages 1 or 2)",
                  heavy_blocks, 4, hierarchical(("node", 4, NVLINK_BPS, NVLINK_LATENCY_S)),
                  80 * GB, global_batch=6, virtual_stages=[1, 2],
                  provenance=V2_MEASURED["v2-interleave-l6-d4"]),
        SmallSpec("v2-selective-l5-d8", "v2",
                  "selective recomputation beats both none and full",
                  selective(dense_chain(3)), 8, two_tier(4, 2), 16 * GB, global_batch=16,
                  recompute=["none", "selective", "full"],
                  provenance=V2_MEASURED["v2-selective-l5-d8"]),
        SmallSpec("v2-overlap-l5-d8", "v2",
                  "overlapped gradient reduction changes the optimal plan (slow spine)",
                  dense_chain(3), 8, two_tier(2, 4, SPINE_BPS / 10), 80 * GB, global_batch=16,
                  overlap_grad_reduce=True, provenance=V2_MEASURED["v2-overlap-l5-d8"]),
        SmallSpec("v2-zero3-buffers-l5-d8", "v2",
                  "ZeRO-3 gather buffers make the fastest ZeRO-3 plan infeasible",
                  dense_chain(3), 8, two_tier(4, 2), 85 * GB // 10, global_batch=16,
                  zero_stages=[0, 3], provenance=V2_MEASURED["v2-zero3-buffers-l5-d8"]),
    ]


V2_MEASURED = {  # the DP's optima in ticks (1 ns), measured when the instances were made
    "v2-interleave-l6-d4":
        "DP optimum 44,268,000 ticks: v = 2, S = 3, d = 1, one block per chunk. With "
        "virtual_stages [1] the optimum is 49,296,000 (v = 1, S = 3, d = 1, two blocks per "
        "stage), so v = 2 saves 10.2 %. A replica all-reduces 2e9 gradient bytes per block, "
        "so both optima pipeline on one replica.",
    "v2-selective-l5-d8":
        "DP optimum 62,106,000 ticks: S = 2, d = 4, stage 0 (embed, block0, block1) "
        "selective, stage 1 none. Recompute [none, full]: 67,488,000 (S = 4, d = 2, full on "
        "stage 0); [none]: 79,452,000 (S = 3, d = 2); [full]: 73,231,000; [none, selective]: "
        "62,106,000. Selective saves 8.0 % over the best plan without it.",
    "v2-overlap-l5-d8":
        "DP optimum 124,102,000 ticks with overlap: S = 1, d = 2 (sync 24,002,000 ticks, "
        "14,902,000 exposed). Without overlap: 126,327,000 with S = 2, d = 1 (no sync). "
        "Cross-evaluated, the overlap optimum costs 133,202,000 without overlap and the "
        "no-overlap optimum 126,327,000 with it: neither plan is optimal in the other "
        "setting.",
    "v2-zero3-buffers-l5-d8":
        "DP optimum 185,214,000 ticks: z = 3, S = 4, d = 2; zero_stages [0] alone is "
        "INFEASIBLE. The faster ZeRO-3 plan S = 2, d = 4 (169,008,000 ticks; the optimum at "
        "9.7 GB = 8.5 GB + the largest buffer, 2 x 3e8 x 2 B) needs 9.0 GB on stage 1, 1.2 "
        "GB of it gather buffers: 7.8 GB without them, so the buffers alone exclude it. At "
        "8.0 GB no plan fits (INFEASIBLE), though that plan would without its buffers.",
}


def _v2_training(spec: SmallSpec) -> dict:
    """The training fields of the v2 choices (DESIGN §3.2) a specification gives."""
    fields: dict = {"allow_recompute": spec.allow_recompute} if spec.recompute is None else \
        {"recompute": spec.recompute}
    if spec.virtual_stages is not None:
        fields["virtual_stages"] = spec.virtual_stages
    if spec.overlap_grad_reduce is not None:
        fields["overlap_grad_reduce"] = spec.overlap_grad_reduce
    return fields


def small_instance(spec: SmallSpec) -> dict:
    """The instance-file dict of one small specification."""
    return {
        "name": spec.name,
        "provenance": {"family": spec.family, "purpose": spec.purpose,
                       "source": "synthetic: verify/instances.py (see instances/small/README.md)",
                       **({"measured": spec.provenance} if spec.provenance else {})},
        "workload": workload_dict(spec.name, spec.layers, spec.configs, spec.microbatches),
        "cluster": {"name": spec.network["kind"], "num_devices": spec.devices,
                    "hbm_bytes": spec.hbm_bytes, "network": spec.network},
        "training": {"global_batch": spec.global_batch, "seq_len": 1024,
                     "microbatches": spec.microbatches,
                     "optimizer": {"name": "adam-mixed", "weight_bytes": 2, "grad_bytes": 2,
                                   "state_bytes": 12},
                     "zero_stages": spec.zero_stages, **_v2_training(spec),
                     **({"strategies": ["dp", "sdp"], "sdp": spec.sdp} if spec.sdp else {})},
    }


# ------------------------------------------------------------------ the paper grid

PAPER_MODELS = {  # preset -> (sequence length, expert width), DESIGN §6 (NEST artifact)
    "bert-large": (512, 1),
    "llama2-7b": (4096, 1),
    "llama3-70b": (4096, 1),
    "gpt3-175b": (2048, 1),
    "mixtral-8x7b": (4096, 4),
}
PAPER_CLUSTERS = {"nest-tpuv4-fattree": "nest-tpuv4", "nest-h100-spineleaf": "nest-h100"}
PAPER_SIZES = (64, 128, 256, 512, 1024)


def paper_instances() -> list[dict]:
    """The NEST grid as preset references: global batch 4096, microbatch 1.

    The workload is profiled on the device of the cluster preset (NEST's HBM sizes)
    with materialised attention (NEST's traced graphs keep the eager attention scores);
    Mixtral uses expert width 4 as in NEST's scripts (DESIGN §6); tensor widths are
    the preset's defaults; the optimizer is the instance format's default 2/2/12 B per
    parameter (the NEST grid's setup since it was first generated).
    """
    return [{
        "name": f"{model}--{cluster}--{devices}",
        "provenance": {"family": f"paper-{cluster}",
                       "source": "NEST (arXiv 2603.06798) evaluation grid and its artifact "
                                 "scai-tech/Nest (instances/paper/README.md)"},
        "workload": {"preset": model, "device": PAPER_CLUSTERS[cluster],
                     "attention": "materialized", **({"ep": [ep]} if ep > 1 else {})},
        "cluster": {"preset": cluster, "num_devices": devices},
        "training": {"global_batch": 4096, "seq_len": seq_len, "microbatches": [1],
                     "zero_stages": [0], "allow_recompute": True},
    } for cluster in PAPER_CLUSTERS for model, (seq_len, ep) in PAPER_MODELS.items()
        for devices in PAPER_SIZES]


PAPER_V2_TRAINING = {"recompute": ["none", "selective", "full"], "virtual_stages": [1, 2, 4],
                     "overlap_grad_reduce": True}


def paper_v2_instances() -> list[dict]:
    """The NEST grid with the v2 choices (DESIGN §3.2) open: the instances of
    :func:`paper_instances` with recompute none / selective / full (the presets' kernel-level
    profiles carry ``sel_fwd_s`` / ``sel_act_bytes``), virtual stages 1, 2 or 4 and overlapped
    gradient reduction; everything else (global batch, microbatch, ZeRO 0, presets) unchanged.
    """
    documents = []
    for document in paper_instances():
        training = {key: value for key, value in document["training"].items()
                    if key != "allow_recompute"}
        documents.append({
            **document,
            "provenance": {"family": document["provenance"]["family"].replace(
                "paper-", "paper-v2-", 1),
                "source": document["provenance"]["source"] + "; v2 choices: virtual "
                "stages, recompute modes, overlapped gradient reduction, priced as "
                "docs/cost-model.md section 3 says (instances/paper-v2/README.md)"},
            "training": {**training, **PAPER_V2_TRAINING}})
    return documents


# ------------------------------------------------------------------ writing


def write_instances(root: Path) -> list[Path]:
    """Write every small, paper and paper-v2 instance under ``root``; returns the files
    written."""
    written = []
    for folder, documents in (("small", [small_instance(s) for s in small_specs()]),
                              ("paper", paper_instances()), ("paper-v2", paper_v2_instances())):
        directory = root / folder
        directory.mkdir(parents=True, exist_ok=True)
        for document in documents:
            path = directory / f"{document['name']}.json"
            _write_json(document, path)
            written.append(path)
    for folder, text in (("small", small_readme()), ("paper", PAPER_README),
                         ("paper-v2", PAPER_V2_README)):
        _write_text(text, root / folder / "README.md")
        written.append(root / folder / "README.md")
    data = Path(__file__).resolve().parent.parent / "tests" / "data"
    for name, family, section in (("worked_example", "worked-example", "3, worked examples"),
                                  ("sdp_worked_example", "sdp", "6")):
        worked = data / f"{name}.json"
        if worked.exists():
            document = json.loads(worked.read_text(encoding="utf-8"))
            document["provenance"] = {"family": family, "source": f"docs/cost-model.md section "
                                      f"{section} (copied from tests/data/{name}.json)"}
            target = root / "small" / f"{name}.json"
            _write_json(document, target)
            written.append(target)
    return written


SMALL_README = """# instances/small — certifiable synthetic instances

Written by `python -m nest_cp.verify.suite` (module `verify/instances.py`); do not edit by
hand, regenerate. Each `<name>.json` has a `<name>.ref.json` beside it, written by
`python -m verify.reference` (see below). `nest-cp verify` (and `make verify`) runs the DP,
CP-SAT and MILP on every file here and certifies the DP against the exact optima.

## Provenance of the numbers

All instances except `worked_example` are **synthetic**: hand-chosen round numbers of the
order of one transformer block of a ~1B-parameter model on a current accelerator, scaled
so that the exact solvers prove optimality in well under a second. They are chosen to
be controllable, not to match any real model. Every number follows from
`verify/instances.py`:

- **Layers** (`dense_chain`, `moe_chain`): an embedding (0.2 ms forward per sample,
  3e8 parameters, 2e8 activation bytes, 8e6 output bytes), blocks `i = 0, 1, ...`
  ((1 + 0.25 i) ms, 2e8 parameters, 2e9 activation bytes, 8e6 output bytes; MoE blocks
  (1.2 + 0.2 i) ms, 1e8 dense + 8e8 expert parameters, 3e9 activation bytes), and a head
  (0.6 ms, 3e8 parameters, 1e9 activation bytes, 4e6 output bytes); a `scale` factor
  multiplies all of them for the larger instances (0.5 for `h2-dense-l8-d16`,
  `h3-dense-l6-d12`).
- **Configurations** (`synthetic_layer`): forward time x microbatch / tp x (1 + 0.1 (tp - 1))
  (10 % tensor-parallel overhead per extra rank), backward = 2 x forward (the usual 2x of
  data + weight gradients), dense parameters and activations / tp, expert parameters / ep,
  checkpoint bytes = output bytes = per-sample output x microbatch. tp > 1 adds two
  all-reduces of the output in forward and two in backward (Megatron-LM, Shoeybi et al.
  2019, Sec. 3); ep > 1 adds two all-to-alls (dispatch, combine) per direction.
- **Optimizer**: mixed-precision Adam, 2 / 2 / 12 bytes per parameter
  (`docs/cost-model.md` §4).
  Sequence length 1024 (informational only: the profiles are given per sample).
- **Networks**: node tier 1e11 B/s, 1 us (NVLink class); rack tier 2.5e10 B/s, 3 us
  (200 Gb/s NIC); spine tier 1.25e10 B/s, 5 us (100 Gb/s NIC), 10x slower in
  `slowspine`; graph networks: a leaf/spine tree whose uplinks carry the per-device share
  of a 4:1 oversubscription (rack / 4), a ring of NVLink-class links (one 10x slower link
  in `graph-ring-dense-l4-d6`), two switched islands (5e10 B/s, 1 us) bridged by one
  1e9 B/s, 20 us link, and a 2 x 4 torus slice (5e10 B/s along rows, 2.5e10 B/s along
  columns, with wrap-around where a dimension exceeds 2).
- **HBM**: 80 GB ("loose": memory never binds). Memory-tight sizes (`tight-*`,
  `moe-l4-d8-tight`, `graph-islands-tight-*`) were chosen by bisecting the capacity with
  the DP: each lies strictly between the smallest capacity at which any plan fits and the
  smallest at which the loose optimum fits, so memory changes the optimum
  (`tight-l8-d16-h3`: 2.5 GB).
  `infeasible-*` have no plan at all: a layer keeping 50 GB of activations on 40 GB
  (recomputation still holds one layer's activations), 3e9 embedding parameters x 16 B on
  40 GB without ZeRO or tensor parallelism, and 8e9 expert parameters (4e9 per device at
  ep 2) with at most ZeRO-1 on 40 GB.
- `worked_example` is the worked example of `docs/cost-model.md` §3 (copied from
  `tests/data/worked_example.json`); its optimum 27,099,000 ticks is derived there.
- **SDP** (`sdp-*`, `sdp_worked_example`; `docs/sdp.md`): the same chains with every block
  maskable (`maskable`): at block level one unit per block, at neuron level 4 width slices
  carrying 90 % of the block; the weight gradient is half the backward (`wgrad_s` = the
  forward time). They allow both strategies (`strategies: ["dp", "sdp"]`), so every run
  reports the best plain plan and, separately, the best SDP plan ranked by T_eff.
  `sdp-only-l6-d4`: four 1e9-parameter blocks (16 GB of state each) and an embedding
  keeping 6 GB of activations per microbatch on 36 GB: every plain split breaks memory
  (the first stage holds up to four microbatches in flight), while SDP with one block per
  worker (C = 1/4) needs 34.6 GB. `sdp-slowtier-l6-d8`: nodes of 2, racks of 2 and a
  2.5e9 B/s pod tier, blocks of 1e9 parameters between an embedding and a head of 1e7:
  the shared all-reduce may cross the pods, a block's holder pair must not.
  `sdp_worked_example` is the worked example of `docs/cost-model.md` §6 (copied from
  `tests/data/sdp_worked_example.json`).
- **v2** (`v2-*`, `docs/cost-model.md` §3): one instance per v2 choice that decides the
  optimum, each measured with the DP against variants without the choice (the numbers are in
  each file's `provenance.measured`). `v2-interleave-l6-d4`: six equal blocks of 1e9
  parameters on one 4-device node, B = 6, virtual stages 1 or 2: v = 2 (one block per chunk
  on 3 stages) is 10.2 % faster than the best v = 1 plan. `v2-selective-l5-d8`:
  `dense_chain(3)` whose blocks recompute 10 % of their forward and keep 30 % of their
  activations under selective recomputation (`selective`; the embedding and head have no
  attention core), 16 GB: selective on the first stage beats the best plan with only none /
  full by 8.0 %. `v2-overlap-l5-d8`: `h2-dense-l5-d8-slowspine` with `overlap_grad_reduce`:
  overlap makes two replicas of one stage (S = 1, d = 2) optimal where a two-stage pipeline
  without replicas is optimal otherwise. `v2-zero3-buffers-l5-d8`: ZeRO 0 or 3 on 8.5 GB,
  where only ZeRO-3 plans fit; the plan that would be optimal without the gather buffers
  (cost model §4) exceeds memory only by its 1.2 GB of buffers, so the optimum is a plan 9.6
  % slower.

## Reference results

`<name>.ref.json` holds, per space (`full`, `structured`), the strongest claim the exact
runs proved: status (OPTIMAL, FEASIBLE with its bound, INFEASIBLE; an optimum the MILP
proved only within its floating-point tolerance carries `tolerance_rel` and the bound it
proved), objective and bound in ticks (1 tick = 1 ns), the solvers that proved it, the
date, time limit and the SHA-256 of the instance content (a reference for other content is
reported as stale, not compared). These references are independent (`"kind":
"independent"`, inferred for files that predate the field): CP-SAT and the MILP proved
them, not the DP they check. They are produced by
`python -m nest_cp.verify.reference instances/small --time-limit 60`, which refuses to
write a reference for an instance whose runs fail any check.

## Instances

"""
SMALL_TABLE_HEADER = ["instance", "family", "layers", "devices", "network", "configs (tp x ep)",
                      "microbatches", "ZeRO", "recompute", "HBM [GB]", "purpose"]

PAPER_README = """# instances/paper — the NEST evaluation grid

Written by `python -m nest_cp.verify.suite` (module `verify/instances.py`); regenerate, do not
edit. Fifty instances: the five models of NEST's evaluation (BERT-large, Llama2-7B,
Llama3-70B, GPT3-175B, Mixtral-8x7B) on its two clusters (`nest-tpuv4-fattree`,
`nest-h100-spineleaf`) at 64, 128, 256, 512 and 1,024 devices; name
`<model>--<cluster>--<devices>.json`.

## Provenance

- Grid, global batch 4,096, microbatch 1, sequence lengths (512 BERT, 2,048 GPT3, 4,096
  the others) and Mixtral's expert width 4: NEST (arXiv 2603.06798) and its artifact
  `scai-tech/Nest`.
- The files reference presets; `nest_cp/io.py` expands them with
  `nest_cp.profiles.presets.workload_from_preset` / `cluster_from_preset`, where every model,
  device and network number carries its citation (model hyperparameters from the model
  papers, device peaks from datasheets and kernel efficiencies from kernel
  microbenchmarks (`docs/device-model.md`), the two networks from NEST's artifact: tiers
  8 / 4 / N/32, 900 / 100 / 400 resp. 900 / 12.5 / 50 "GB/s" with NEST's 2^30
  conversion, 64 GiB resp. 90 GiB HBM). The workload is profiled on the cluster's own
  device (`nest-tpuv4`, `nest-h100`) with materialised attention (NEST's traced graphs
  keep the eager attention scores); tensor widths are the presets' defaults; ZeRO 0
  (NEST prices none), recomputation allowed; optimizer 2/2/12 B per parameter (the
  instance format's default; NEST's setup here, where the presets default to
  Megatron-LM's 18 B).
- `nest-cp verify` runs only the DP here (no exact solver scales to these sizes). The
  `<name>.ref.json` beside each file is a **regression snapshot** (`"kind":
  "regression-snapshot"`): the DP's own structured answer, written by
  `python -m nest_cp.verify.reference instances/paper --backends dp`. It is not an
  independent reference and certifies nothing; `nest-cp verify` only reports whether the
  DP's answer changed ("snapshot same" / "snapshot changed"), and a change fails the run
  until a person confirms it and regenerates the snapshots.
"""


PAPER_V2_README = """# instances/paper-v2 — the NEST grid with the v2 choices

Written by `python -m nest_cp.verify.suite` (module `verify/suite.py`, function
`paper_v2_instances`); regenerate, do not edit. The same fifty instances as
`instances/paper` (five models x two clusters x 64 ... 1,024 devices, same names, presets,
global batch 4,096, microbatch 1, sequence lengths, Mixtral's expert width 4, ZeRO 0,
optimizer 2/2/12 B per parameter), with the training choices of `docs/cost-model.md` §3 open:

- `recompute: ["none", "selective", "full"]` per stage (replacing `allow_recompute: true`,
  which allows none and full). Selective recomputation needs `sel_fwd_s` / `sel_act_bytes`
  in every profile; the kernel-level profiler (`nest_cp/profiles/profiler.py`, expanded from the
  presets by `nest_cp/io.py`) fills them for every layer: the attention core's forward time
  and the activation bytes a block keeps without it (Korthikanti et al. 2022); layers
  without attention recompute nothing and keep every activation.
- `virtual_stages: [1, 2, 4]` (interleaved 1F1B, Megatron-LM's virtual pipeline; v > 1
  needs S >= 2 and m mod S = 0).
- `overlap_grad_reduce: true` (the data-parallel gradient reduction runs in buckets during
  the backward of the last microbatch, Megatron-LM's `--overlap-grad-reduce` and PyTorch
  DDP's default).

Provenance of every other number: `instances/paper/README.md`. Family names carry
`paper-v2-` so the per-family summaries keep the two grids apart.

`nest-cp verify` (no PATHS, `make verify`) runs only the DP here, as on `instances/paper`.
The `<name>.ref.json` beside each file is a **regression snapshot** (`"kind":
"regression-snapshot"`) of the DP's own structured answer, written by
`python -m nest_cp.verify.reference instances/paper-v2 --backends dp --jobs 1`; it
certifies nothing and only tells `nest-cp verify` whether the DP's answer changed.

What the v2 choices buy over `instances/paper` per instance (T with and without them, the
DP plan's v and recompute modes) is tabulated in `reports/paper_v2/README.md`, written by
`.venv/bin/python scripts/reports/paper_v2.py`.
"""


def small_readme() -> str:
    """The README of instances/small: provenance text and one table row per instance."""
    rows = []
    for spec in small_specs():
        network = spec.network
        kind = f"{len(network['tiers'])} tiers" if network["kind"] == "hierarchical" else \
            f"graph, {len(network['switches'])} switches"
        rows.append("| " + " | ".join([
            spec.name, spec.family, str(sum(layer.repeat for layer in spec.layers)),
            str(spec.devices), kind, ", ".join(f"{tp}x{ep}" for tp, ep in spec.configs),
            ", ".join(map(str, spec.microbatches)), ", ".join(map(str, spec.zero_stages)),
            _recompute_cell(spec), f"{spec.hbm_bytes / GB:g}",
            spec.purpose]) + " |")
    rows.append("| worked_example | worked-example | 2 | 4 | 2 tiers | 1x1 | 1 | 0 | no | 80 | "
                "docs/cost-model.md §3, worked examples |")
    rows.append("| sdp_worked_example | sdp | 4 | 4 | 2 tiers | 1x1 | 1 | 0 | no | 80 | "
                "docs/cost-model.md §6 (SDP, h = 2) |")
    head = ["| " + " | ".join(SMALL_TABLE_HEADER) + " |",
            "|" + "---|" * len(SMALL_TABLE_HEADER)]
    return SMALL_README + "\n".join(head + rows) + "\n"


def _recompute_cell(spec: SmallSpec) -> str:
    """The README's recompute column: yes / no (allow_recompute) or the allowed modes."""
    if spec.recompute is not None:
        return ", ".join(spec.recompute)
    return "yes" if spec.allow_recompute else "no"


def _write_text(text: str, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _write_json(document: dict, path: Path) -> None:
    _write_text(json.dumps(document, indent=1) + "\n", path)


def main(argv: list[str] | None = None) -> int:
    """Regenerate the instance folders (default root: ./instances)."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path("instances")
    written = write_instances(root)
    LOGGER.info("wrote %d instance files under %s", len(written), root)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    raise SystemExit(main())
