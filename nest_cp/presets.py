"""Named models, devices and networks, and instances built from them.

Every number carries its source in a comment. Models are the five of NEST's evaluation
(DESIGN §6); devices are vendor datasheet values with an achievable-FLOP/s fraction taken from
published training runs; networks are NEST's two setups and an NVIDIA DGX H100 SuperPOD.

Decisions (documented here because they change numbers):

- **GB/s of the NEST setups.** NEST multiplies its "GB/s" figures by 2^30
  (``/work/shared/nest-reference/README.md``, ``setup.bandwidth_conversion``), so its links
  really run at GiB/s. The ``nest-*`` networks reproduce NEST's setups, so they use the same
  conversion: 900 "GB/s" = 900 * 2^30 B/s. HBM is 64 GiB resp. 90 GiB (x 2^30), as in NEST.
- **NEST devices.** DESIGN §6 fixes NEST's HBM (64 GiB "TPUv4-like", 90 GiB H100), which is not
  the datasheet capacity (TPU v4: 32 GiB; H100 SXM: 80 GB). The datasheet devices ``tpuv4`` and
  ``h100-sxm`` keep their real capacity; ``nest-tpuv4`` and ``nest-h100`` are the same chips
  with NEST's capacity and are the default devices of the ``nest-*`` networks. Pass
  ``device="tpuv4"`` explicitly to plan for a real 32 GiB TPU v4 on NEST's fat-tree.
- **Tier sizes.** NEST's setups have tiers 8 / 4 / N/32 (devices per box, boxes per group,
  groups). For N not a multiple of 32 (in particular N < 32) the outermost size is
  ceil(N / 32), so the product covers N; the inner tiers keep their sizes (a box may be
  partly populated). Bandwidths are each tier's own figure exactly as DESIGN §6 gives them
  (900 / 100 / 400): NEST itself prices pipeline transfers with the prefix minimum
  (900 / 100 / 100), which is *not* applied here.
- **DGX SuperPOD.** NVLink 4 gives an H100 18 links x 25 GB/s = 450 GB/s per direction
  (900 GB/s bidirectional, the datasheet figure). The ring formulas of DESIGN §3 charge v/β
  per device with every device sending and receiving at once, so β is the per-direction
  bandwidth: 450e9 B/s. Each GPU has its own ConnectX-7 400 Gb/s NDR port (50e9 B/s per
  direction) on a rail-optimised, non-blocking fat tree: leaf tier = one scalable unit of 32
  DGX nodes (256 GPUs), spine tier above (NVIDIA DGX SuperPOD Reference Architecture,
  DGX H100, RA-11333-001). Non-blocking means leaf and spine give the same 50e9 B/s; traffic
  between different rails is assumed to run at the same rate (NCCL PXN via NVLink). The
  latencies 1 / 2 / 3 µs (NVLink, one leaf hop, leaf-spine-leaf) are an assumption of the
  order NCCL measures, not a datasheet number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from nest_cp.errors import InstanceFormatError
from nest_cp.model import (
    Cluster,
    HierarchicalNetwork,
    Instance,
    IntraConfig,
    RecomputeMode,
    Tier,
    TrainingSetup,
    Workload,
)
from nest_cp.profiler import DeviceSpec, ModelKind, Norm, TransformerSpec, profile_workload

GiB = 2**30
DEVICES_PER_NODE = 8  # NEST boxes, DGX H100 nodes: the TP domain of Megatron's rules

# ------------------------------------------------------------------ models

MODELS: Mapping[str, TransformerSpec] = MappingProxyType({
    # BERT-large: Devlin et al. 2019 (arXiv 1810.04805) §3: L = 24, H = 1024, A = 16,
    # FFN 4H; vocabulary 30,522, 512 positions, 2 token types, dropout 0.1 (Google's
    # bert-large-uncased config.json). Post-LN, GeLU, biases, MLM decoder tied to the
    # word embedding. Sequence 512 (DESIGN §6).
    "bert-large": TransformerSpec(
        name="bert-large", kind=ModelKind.ENCODER, hidden=1024, ffn_hidden=4096,
        num_layers=24, num_heads=16, vocab=30522, tied_embeddings=True,
        norm=Norm.LAYERNORM, bias=True, dropout=True, learned_positions=512, token_types=2,
        default_seq_len=512),
    # Llama 2 7B: Touvron et al. 2023 (arXiv 2307.09288) §2.2 and the meta-llama/Llama-2-7b-hf
    # model card config: hidden 4096, intermediate 11008, 32 layers, 32 heads (no GQA at 7B),
    # vocabulary 32,000, RMSNorm, SwiGLU, rotary positions, no biases, untied head, no
    # dropout. Sequence 4096 (DESIGN §6, the model's context length).
    "llama2-7b": TransformerSpec(
        name="llama2-7b", kind=ModelKind.DECODER, hidden=4096, ffn_hidden=11008,
        num_layers=32, num_heads=32, num_kv_heads=32, vocab=32000, gated_mlp=True,
        norm=Norm.RMSNORM, bias=False, dropout=False, default_seq_len=4096),
    # Llama 3 70B: Dubey et al. 2024, "The Llama 3 Herd of Models" (arXiv 2407.21783),
    # Table 3: 80 layers, model dimension 8192, FFN 28,672, 64 heads, 8 KV heads; vocabulary
    # 128,256 (meta-llama/Meta-Llama-3-70B config). Sequence 4096 per DESIGN §6.
    "llama3-70b": TransformerSpec(
        name="llama3-70b", kind=ModelKind.DECODER, hidden=8192, ffn_hidden=28672,
        num_layers=80, num_heads=64, num_kv_heads=8, vocab=128256, gated_mlp=True,
        norm=Norm.RMSNORM, bias=False, dropout=False, default_seq_len=4096),
    # GPT-3 175B: Brown et al. 2020 (arXiv 2005.14165) Table 2.1: 96 layers, d_model 12,288,
    # 96 heads of 128, context 2048; FFN 4 * d_model and the GPT-2 architecture and BPE
    # vocabulary of 50,257 (Radford et al. 2019): LayerNorm, GeLU, biases, learned positions,
    # tied embeddings, dropout 0.1. Sequence 2048 (DESIGN §6).
    "gpt3-175b": TransformerSpec(
        name="gpt3-175b", kind=ModelKind.DECODER, hidden=12288, ffn_hidden=49152,
        num_layers=96, num_heads=96, vocab=50257, tied_embeddings=True,
        norm=Norm.LAYERNORM, bias=True, dropout=True, learned_positions=2048,
        default_seq_len=2048),
    # Mixtral 8x7B: Jiang et al. 2024 (arXiv 2401.04088) Table 1: dim 4096, 32 layers,
    # 32 heads of 128, 8 KV heads, hidden_dim 14,336, vocabulary 32,000, 8 experts, top-2;
    # SwiGLU experts, RMSNorm, no biases, untied head (mistralai/Mixtral-8x7B-v0.1 config).
    # Sequence 4096 (DESIGN §6; NEST runs it with EP 4).
    "mixtral-8x7b": TransformerSpec(
        name="mixtral-8x7b", kind=ModelKind.DECODER, hidden=4096, ffn_hidden=14336,
        num_layers=32, num_heads=32, num_kv_heads=8, vocab=32000, gated_mlp=True,
        num_experts=8, top_k=2, norm=Norm.RMSNORM, bias=False, dropout=False,
        default_seq_len=4096),
})

# ------------------------------------------------------------------ devices

_H100_SXM = DeviceSpec(
    # NVIDIA H100 Tensor Core GPU datasheet (SXM): BF16 1,979 TFLOPS with sparsity, i.e.
    # 989.4 TFLOPS dense; HBM3 3.35 TB/s; 80 GB. Efficiency 0.40: Llama 3 (Dubey et al. 2024,
    # Table 4) reports 38-43 % BF16 model-FLOPs utilisation on 8k-16k H100s.
    name="h100-sxm", peak_flops=989.4e12, mem_bandwidth_Bps=3.35e12, hbm_bytes=80 * 10**9,
    efficiency=0.40)
_TPU_V4 = DeviceSpec(
    # Google Cloud TPU v4 documentation and Jouppi et al. 2023 (ISCA, "TPU v4: An Optically
    # Reconfigurable Supercomputer"): 275 TFLOPS bf16 per chip, 32 GiB HBM2 at 1,200 GB/s.
    # Efficiency 0.46: PaLM 540B trained at 46.2 % MFU on 6,144 TPU v4 (Chowdhery et al. 2022).
    name="tpuv4", peak_flops=275e12, mem_bandwidth_Bps=1.2e12, hbm_bytes=32 * GiB,
    efficiency=0.46)

DEVICES: Mapping[str, DeviceSpec] = MappingProxyType({
    "h100-sxm": _H100_SXM,
    # NVIDIA A100 Tensor Core GPU datasheet (80 GB SXM): BF16 312 TFLOPS dense, HBM2e
    # 2,039 GB/s, 80 GB. Efficiency 0.50: Narayanan et al. 2021 (SC'21, Megatron-LM) sustain
    # 52 % of peak on GPT-3-class models on A100s.
    "a100-80gb": DeviceSpec(name="a100-80gb", peak_flops=312e12, mem_bandwidth_Bps=2.039e12,
                            hbm_bytes=80 * 10**9, efficiency=0.50),
    "tpuv4": _TPU_V4,
    # NEST's "TPUv4-like" device: TPU v4 compute with 64 GiB HBM (DESIGN §6).
    "nest-tpuv4": DeviceSpec(name="nest-tpuv4", peak_flops=_TPU_V4.peak_flops,
                             mem_bandwidth_Bps=_TPU_V4.mem_bandwidth_Bps, hbm_bytes=64 * GiB,
                             efficiency=_TPU_V4.efficiency),
    # NEST's H100 setup: H100 SXM compute with 90 GiB HBM (DESIGN §6).
    "nest-h100": DeviceSpec(name="nest-h100", peak_flops=_H100_SXM.peak_flops,
                            mem_bandwidth_Bps=_H100_SXM.mem_bandwidth_Bps, hbm_bytes=90 * GiB,
                            efficiency=_H100_SXM.efficiency),
})

# ------------------------------------------------------------------ networks


@dataclass(frozen=True, slots=True)
class TierSpec:
    """A tier of a preset network; ``size`` None: as many as N needs (outermost tier only)."""

    name: str
    size: int | None
    bandwidth_Bps: float
    latency_s: float


@dataclass(frozen=True, slots=True)
class NetworkPreset:
    """A hierarchical network family, sized for any device count, with its default device."""

    name: str
    description: str
    default_device: str
    tiers: tuple[TierSpec, ...]

    def build(self, num_devices: int) -> HierarchicalNetwork:
        """Tiers with fixed inner sizes and an outermost size of ceil(N / inner product)."""
        inner = math.prod(spec.size for spec in self.tiers if spec.size is not None)
        return HierarchicalNetwork(tuple(
            Tier(spec.name, spec.size if spec.size is not None else -(-num_devices // inner),
                 spec.bandwidth_Bps, spec.latency_s)
            for spec in self.tiers))


NETWORKS: Mapping[str, NetworkPreset] = MappingProxyType({
    # NEST's TPUv4-like fat-tree (DESIGN §6; nest/Estimator/configs.py defaults): 8 devices per
    # box, 4 boxes per group, N/32 groups; 900 / 100 / 400 GB/s (x 2^30), 100 / 200 / 300 µs.
    "nest-tpuv4-fattree": NetworkPreset(
        name="nest-tpuv4-fattree",
        description="NEST's TPUv4-like fat-tree: 8 / 4 / N/32, 900 / 100 / 400 GiB/s, "
                    "100 / 200 / 300 us, 64 GiB HBM",
        default_device="nest-tpuv4",
        tiers=(TierSpec("box", 8, 900 * GiB, 100e-6), TierSpec("group", 4, 100 * GiB, 200e-6),
               TierSpec("fabric", None, 400 * GiB, 300e-6))),
    # NEST's H100 spine-leaf (DESIGN §6; scripts/h100_spineLeaf/run_eval.sh
    # --bandwidths_per_level 900 12.5 50): same sizes and latencies, 900 / 12.5 / 50 GB/s.
    "nest-h100-spineleaf": NetworkPreset(
        name="nest-h100-spineleaf",
        description="NEST's H100 spine-leaf: 8 / 4 / N/32, 900 / 12.5 / 50 GiB/s, "
                    "100 / 200 / 300 us, 90 GiB HBM",
        default_device="nest-h100",
        tiers=(TierSpec("nvlink", 8, 900 * GiB, 100e-6), TierSpec("leaf", 4, 12.5 * GiB, 200e-6),
               TierSpec("spine", None, 50 * GiB, 300e-6))),
    # NVIDIA DGX SuperPOD reference architecture (DGX H100): NVLink nodes of 8 GPUs, scalable
    # units of 32 nodes on NDR 400 Gb/s leaves, spine above (see the module docstring).
    "dgx-h100-superpod": NetworkPreset(
        name="dgx-h100-superpod",
        description="DGX H100 SuperPOD: NVLink 8 GPUs at 450 GB/s per direction, NDR 400 Gb/s "
                    "rail-optimised leaf (32 nodes) and spine, 1 / 2 / 3 us",
        default_device="h100-sxm",
        tiers=(TierSpec("nvlink", 8, 450e9, 1e-6), TierSpec("leaf", 32, 50e9, 2e-6),
               TierSpec("spine", None, 50e9, 3e-6))),
})

# ------------------------------------------------------------------ builders


def _lookup(registry: Mapping, name: object, field: str = "preset"):
    if not isinstance(name, str) or name not in registry:
        raise InstanceFormatError(f"expected one of {', '.join(sorted(registry))}, got {name!r}",
                                  field=field)
    return registry[name]


def _device_for(network: NetworkPreset, device: str | None) -> DeviceSpec:
    return _lookup(DEVICES, network.default_device if device is None else device, "device")


def network_cluster(network: str, devices: int, device: str | None = None,
                    hbm_reserve: float = 0.0) -> Cluster:
    """The preset network sized for ``devices``, HBM from ``device`` or the network's default."""
    preset = _lookup(NETWORKS, network)
    if not (isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1):
        raise InstanceFormatError(f"expected an integer >= 1, got {devices!r}",
                                  field="num_devices")
    spec = _device_for(preset, device)
    return Cluster(num_devices=devices, hbm_bytes=spec.hbm_bytes, network=preset.build(devices),
                   hbm_reserve=hbm_reserve, name=f"{network}-{devices}",
                   peak_flops_per_s=spec.peak_flops)


def default_tp_widths(model: TransformerSpec, devices: int) -> tuple[int, ...]:
    """Powers of two up to the devices of a node that divide the (kv) heads and fit N."""
    return tuple(width for width in (1, 2, 4, 8)
                 if width <= min(DEVICES_PER_NODE, devices) and model.kv_heads % width == 0)


def default_ep_widths(model: TransformerSpec, devices: int) -> tuple[int, ...]:
    """(1,) for dense models; (1, 2, 4, 8) dividing the experts for MoE models."""
    if not model.is_moe:
        return (1,)
    return tuple(width for width in (1, 2, 4, 8)
                 if width <= devices and model.num_experts % width == 0)


def _configs(tp_widths: tuple[int, ...], ep_widths: tuple[int, ...],
             devices: int | None) -> tuple[IntraConfig, ...]:
    """Every (tp, ep) pair whose replica fits in ``devices`` (None: no limit)."""
    configs = tuple(IntraConfig(tp, ep) for tp in tp_widths for ep in ep_widths
                    if devices is None or tp * ep <= devices)
    if not configs:
        raise InstanceFormatError(f"expected a tp x ep width within {devices} devices, got "
                                  f"tp {list(tp_widths)}, ep {list(ep_widths)}", field="tp")
    return configs


def build_instance(model: str, devices: int, network: str, device: str | None = None,
                   global_batch: int = 4096, seq_len: int | None = None,
                   microbatches: tuple[int, ...] = (1,), tp_widths: tuple[int, ...] | None = None,
                   ep_widths: tuple[int, ...] | None = None,
                   zero_stages: tuple[int, ...] = (0, 1, 2, 3),
                   recompute_modes: tuple[RecomputeMode, ...] = (RecomputeMode.NONE,
                                                                 RecomputeMode.FULL),
                   name: str | None = None) -> Instance:
    """An instance of a preset model on a preset network of ``devices`` devices.

    Defaults follow DESIGN §6: the model's sequence length, mixed-precision Adam (2/2/12),
    tensor widths 1..8 dividing the heads, expert widths 1..8 dividing the experts.
    """
    spec = _lookup(MODELS, model, "model")
    cluster = network_cluster(network, devices, device)
    device_spec = _device_for(NETWORKS[network], device)
    training = TrainingSetup(global_batch=global_batch,
                             seq_len=spec.default_seq_len if seq_len is None else seq_len,
                             microbatches=tuple(microbatches), zero_stages=tuple(zero_stages),
                             recompute_modes=tuple(recompute_modes))
    tp = default_tp_widths(spec, devices) if tp_widths is None else tuple(tp_widths)
    ep = default_ep_widths(spec, devices) if ep_widths is None else tuple(ep_widths)
    workload = profile_workload(spec, device_spec, training.seq_len, training.microbatches,
                                _configs(tp, ep, devices))
    return Instance(workload=workload, cluster=cluster, training=training,
                    name=name or f"{model}-{network}-{devices}")


# ------------------------------------------------------------------ instance files


def _int_list(options: dict, key: str) -> tuple[int, ...] | None:
    value = options.get(key)
    if value is None:
        return None
    values = value if isinstance(value, list | tuple) else [value]
    if not values or any(not isinstance(v, int) or isinstance(v, bool) or v < 1
                         for v in values):
        raise InstanceFormatError(f"expected a list of integers >= 1, got {value!r}", field=key)
    return tuple(values)


def _check_options(options: dict, allowed: set[str]) -> None:
    for key in options:
        if key not in allowed:
            raise InstanceFormatError(f"expected one of {', '.join(sorted(allowed))}, "
                                      f"got option {key!r}", field=key)


def workload_from_preset(name: str, options: dict, training: TrainingSetup) -> Workload:
    """A preset model profiled for ``training`` (options: ``device``, ``tp``, ``ep``).

    Without ``device`` the profile uses ``h100-sxm``; without ``tp``/``ep`` the default widths
    of :func:`build_instance` (not limited by a device count, which a workload does not know).
    """
    spec = _lookup(MODELS, name)
    _check_options(options, {"device", "tp", "ep"})
    device = _lookup(DEVICES, options.get("device", "h100-sxm"), "device")
    tp = _int_list(options, "tp") or default_tp_widths(spec, DEVICES_PER_NODE)
    ep = _int_list(options, "ep") or default_ep_widths(spec, spec.num_experts)
    return profile_workload(spec, device, training.seq_len, training.microbatches,
                            _configs(tp, ep, None))


def cluster_from_preset(name: str, options: dict) -> Cluster:
    """A preset network (options: ``num_devices`` required, ``device``, ``hbm_reserve``)."""
    _lookup(NETWORKS, name)
    _check_options(options, {"num_devices", "device", "hbm_reserve"})
    if "num_devices" not in options:
        raise InstanceFormatError("expected an integer >= 1, got nothing", field="num_devices")
    reserve = options.get("hbm_reserve", 0.0)
    if isinstance(reserve, bool) or not isinstance(reserve, int | float) or not 0 <= reserve < 1:
        raise InstanceFormatError(f"expected a fraction in [0, 1), got {reserve!r}",
                                  field="hbm_reserve")
    device = options.get("device")
    if device is not None and not isinstance(device, str):
        raise InstanceFormatError(f"expected a device name, got {device!r}", field="device")
    return network_cluster(name, options["num_devices"], device, float(reserve))
