"""Named models, devices and networks, and instances built from them.

Every number carries its source in a comment. Models are the five of NEST's evaluation
(DESIGN §6; more as Hugging Face configs in ``instances/models/``); devices are datasheet
peaks with kernel efficiencies from published kernel microbenchmarks (DESIGN §1.1 v2, never
end-to-end training utilisation; ``docs/device-model.md``); networks are NEST's two setups,
an NVIDIA DGX H100 SuperPOD and Meta's Llama 3 cluster. Instances built here default to
Megatron-LM's 18 B per parameter (:data:`MEGATRON_ADAM`).

Decisions (documented here because they change numbers):

- **GB/s of the NEST setups.** NEST multiplies its "GB/s" figures by 2^30
  (NEST's reference digest shared with this repository, ``nest-reference/README.md``,
  ``setup.bandwidth_conversion``), so its links
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
  order NCCL measures, not a datasheet number. The inter-node tiers are per GPU, so a
  DGX H100 node's eight 400 Gb/s ConnectX-7 ports are eight channels: a collective with all
  eight GPUs of every node it touches runs on all eight NICs (docs/cost-model.md §5 a).
- **Link efficiency** (docs/cost-model.md §5 b). A tier's ``efficiency`` is the bus bandwidth
  nccl-tests measures for a large ring all-reduce over the link's peak per direction
  (github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md defines bus bandwidth). The
  figures, each from an NCCL maintainer's answer, are below (``_NVLINK4_EFFICIENCY`` ...).
  NEST's setups keep efficiency 1: they reproduce NEST's own pricing at line rate.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import (
    Cluster,
    HierarchicalNetwork,
    Instance,
    IntraConfig,
    MlpKind,
    NormKind,
    Optimizer,
    RecomputeMode,
    Tier,
    TrainingSetup,
    Workload,
)
from nest_cp.profiles.kernels import DeviceSpec, DType, gemm_efficiency_from_benchmark
from nest_cp.profiles.profiler import (
    AttentionKind,
    ProfileOptions,
    context_configs,
    profile_workload,
)
from nest_cp.profiles.transformer import ModelKind, TransformerSpec

GiB = 2**30
DEVICES_PER_NODE = 8  # NEST boxes, DGX H100 nodes: the TP domain of Megatron's rules

# Megatron-LM's mixed-precision Adam: bf16 weights (2), fp32 main gradients (4, also what the
# data-parallel reduction sends), fp32 master weights + two moments (12): 18 B per parameter
# (megatron/training/theoretical_memory_usage.py; DESIGN §1.3). The presets' default.
MEGATRON_ADAM = Optimizer(weight_bytes=2, grad_bytes=4, state_bytes=12, name="adam-megatron")
# Megatron-LM's fp16 mixed precision without --accumulate-allreduce-grads-in-fp32 (its default
# for fp16; bf16 forces fp32): fp16 weights (2) and fp16 gradients (2, what data-parallel
# all-reduce sends), fp32 master weights + two moments (12) and the fp32 copy of the gradient
# the optimizer steps on (2 more of the 18 B Megatron's estimator charges per parameter).
MEGATRON_FP16_ADAM = Optimizer(weight_bytes=2, grad_bytes=2, state_bytes=14,
                               name="adam-megatron-fp16")

# ------------------------------------------------------------------ models

MODELS: Mapping[str, TransformerSpec] = MappingProxyType({
    # BERT-large: Devlin et al. 2019 (arXiv 1810.04805) §3: L = 24, H = 1024, A = 16,
    # FFN 4H; vocabulary 30,522, 512 positions, 2 token types, dropout 0.1 (Google's
    # bert-large-uncased config.json). Post-LN, GeLU, biases, MLM decoder tied to the
    # word embedding. Sequence 512 (DESIGN §6).
    "bert-large": TransformerSpec(
        name="bert-large", kind=ModelKind.ENCODER, hidden=1024, ffn_hidden=4096,
        num_layers=24, num_heads=16, vocab=30522, tied_embeddings=True,
        norm=NormKind.LAYERNORM, bias=True, dropout=True, learned_positions=512, token_types=2,
        default_seq_len=512),
    # Llama 2 7B: Touvron et al. 2023 (arXiv 2307.09288) §2.2 and the meta-llama/Llama-2-7b-hf
    # model card config: hidden 4096, intermediate 11008, 32 layers, 32 heads (no GQA at 7B),
    # vocabulary 32,000, RMSNorm, SwiGLU, rotary positions, no biases, untied head, no
    # dropout. Sequence 4096 (DESIGN §6, the model's context length).
    "llama2-7b": TransformerSpec(
        name="llama2-7b", kind=ModelKind.DECODER, hidden=4096, ffn_hidden=11008,
        num_layers=32, num_heads=32, num_kv_heads=32, vocab=32000,
        activation=MlpKind.SWIGLU, norm=NormKind.RMSNORM, bias=False, dropout=False,
        default_seq_len=4096),
    # Llama 3 70B: Dubey et al. 2024, "The Llama 3 Herd of Models" (arXiv 2407.21783),
    # Table 3: 80 layers, model dimension 8192, FFN 28,672, 64 heads, 8 KV heads; vocabulary
    # 128,256 (meta-llama/Meta-Llama-3-70B config). Sequence 4096 per DESIGN §6.
    "llama3-70b": TransformerSpec(
        name="llama3-70b", kind=ModelKind.DECODER, hidden=8192, ffn_hidden=28672,
        num_layers=80, num_heads=64, num_kv_heads=8, vocab=128256,
        activation=MlpKind.SWIGLU, norm=NormKind.RMSNORM, bias=False, dropout=False,
        default_seq_len=4096),
    # GPT-3 175B: Brown et al. 2020 (arXiv 2005.14165) Table 2.1: 96 layers, d_model 12,288,
    # 96 heads of 128, context 2048; FFN 4 * d_model and the GPT-2 architecture and BPE
    # vocabulary of 50,257 (Radford et al. 2019): LayerNorm, GeLU, biases, learned positions,
    # tied embeddings, dropout 0.1. Sequence 2048 (DESIGN §6).
    "gpt3-175b": TransformerSpec(
        name="gpt3-175b", kind=ModelKind.DECODER, hidden=12288, ffn_hidden=49152,
        num_layers=96, num_heads=96, vocab=50257, tied_embeddings=True,
        norm=NormKind.LAYERNORM, bias=True, dropout=True, learned_positions=2048,
        default_seq_len=2048),
    # Mixtral 8x7B: Jiang et al. 2024 (arXiv 2401.04088) Table 1: dim 4096, 32 layers,
    # 32 heads of 128, 8 KV heads, hidden_dim 14,336, vocabulary 32,000, 8 experts, top-2;
    # SwiGLU experts, RMSNorm, no biases, untied head (mistralai/Mixtral-8x7B-v0.1 config).
    # Sequence 4096 (DESIGN §6; NEST runs it with EP 4).
    "mixtral-8x7b": TransformerSpec(
        name="mixtral-8x7b", kind=ModelKind.DECODER, hidden=4096, ffn_hidden=14336,
        num_layers=32, num_heads=32, num_kv_heads=8, vocab=32000,
        activation=MlpKind.SWIGLU, num_experts=8, top_k=2, norm=NormKind.RMSNORM, bias=False,
        dropout=False, default_seq_len=4096),
})

# ------------------------------------------------------------------ devices
# Kernel figures only (DESIGN §1.1 v2), never end-to-end training utilisation. The sources
# are listed once more, with the arithmetic, in docs/device-model.md.
#
# GEMM: the maximum achievable matmul FLOPS (MAMF) table of S. Bekman's "Machine Learning
# Engineering" (github.com/stas00/ml-engineering, compute/accelerator/README.md), which
# scans large bf16 torch.matmul shapes and reports the best: A100 SXM 267.9 of 312 TFLOP/s at
# 6912x16384x2048 (CUDA 12.1); H100 SXM 792.1 of 989 at 6144x17920x2816 (CUDA 12.1); H100/H200
# SXM 794.5 (80.3 %); B200 SXM 1745.0 of 2250 (77.6 %). gemm_efficiency is that fraction
# divided by the model's own tile/wave quantisation at the benchmark shape, so the model
# reproduces the benchmark. Output tiles 128x128, 128x256 and 256x128: the large cuBLAS
# tiles of NVIDIA's Matrix Multiplication Background User's Guide (DU-09799-001, §2.3).
# Attention: FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608) Fig. 5c and 6b, bf16,
# head dim 128, no mask, sequence 16k on H100 SXM: forward 649, backward 581 TFLOP/s; its
# sequence sweep (pytorch/benchmark commit ff65cb6, FA3 forward, head dim 128, 16k tokens:
# 430 TFLOP/s at s = 512 up to 621 at 16k) gives the saturation s / (s + 240). A100:
# FlashAttention-2 (Dao 2023, arXiv 2307.08691): forward up to 73 % of peak (abstract),
# backward about 63 % (Fig. 6, head dim 128, read from the figure).
# Memory-bound kernels: 90 % of the datasheet HBM bandwidth, the order STREAM-style copy
# and triad microbenchmarks reach on HBM GPUs (an assumption, not one cited measurement;
# `nest-cp calibrate` fits it).
# cuBLAS's tile shapes, most efficient first (NVIDIA DU-09799-001 §2.3): 256x128 and 128x256,
# 128x128, 256x64 and 64x256, 128x64 and 64x128. The model charges them alike and takes the
# best quantised; the 64-wide ones serve skinny outputs (n or m of a few hundred).
_GPU_TILES = ((128, 128), (128, 256), (256, 128), (64, 256), (256, 64), (64, 128), (128, 64))
# Fixed time per GEMM kernel on the H100 (launch, main-loop ramp-up, last wave's epilogue):
# least squares on log time to OpenXLA's measured sm_90 bf16 GEMM table
# (nest_cp.profiles.kernel_tables.H100_GEMM_OPENXLA, 72 shapes from 256 to 4096; the halves of the
# table give 5.3 and 5.4 us), with the GEMM efficiency re-derived from the MAMF benchmark at
# each candidate. tests/test_profiler_v2.py refits it. H200: the same GH100 silicon (assumed).
_H100_GEMM_FIXED_S = 5.4e-6


def _gh100_gemm_efficiency(mamf_fraction: float, fixed_s: float) -> float:
    """GH100's GEMM efficiency from a MAMF figure at 6144 x 17920 x 2816, given the fixed
    per-GEMM time (the H100's and H200's benchmarks share the shape)."""
    return gemm_efficiency_from_benchmark(mamf_fraction, 6144, 17920, 132, _GPU_TILES, k=2816,
                                          peak_flops=989.4e12, fixed_s=fixed_s)


def h100_with_gemm_fixed_time(fixed_s: float) -> DeviceSpec:
    """The H100 preset with another fixed per-GEMM time and the efficiency re-derived from
    its MAMF benchmark at it: what the fit of the fixed time compares (0: quantisation only)."""
    return replace(_H100_SXM, gemm_fixed_s=fixed_s,
                   gemm_efficiency=_gh100_gemm_efficiency(792.1 / 989.4, fixed_s))

_FA3_SEQ_HALF = 240
_FA3_AT_16K = (16384 + _FA3_SEQ_HALF) / 16384  # undo the saturation at the benchmark length

_H100_SXM = DeviceSpec(
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 1,979 TFLOPS with sparsity = 989.4
    # dense (132 SMs x 4 tensor cores x 1024 FLOP/clock x 1.83 GHz); FP8 1,979 dense, TF32
    # 494.7 dense, FP32 66.9; HBM3 3.35 TB/s; 80 GB.
    name="h100-sxm", peak_flops=989.4e12, mem_bandwidth_Bps=3.35e12, hbm_bytes=80 * 10**9,
    compute_units=132, gemm_tiles=_GPU_TILES,
    gemm_efficiency=_gh100_gemm_efficiency(792.1 / 989.4, _H100_GEMM_FIXED_S),
    gemm_fixed_s=_H100_GEMM_FIXED_S,
    attention_fwd_efficiency=649 / 989.4 * _FA3_AT_16K,
    attention_bwd_efficiency=581 / 989.4 * _FA3_AT_16K,
    attention_seq_half=_FA3_SEQ_HALF, memory_efficiency=0.90,
    peak_flops_by_dtype=((DType.BF16, 989.4e12), (DType.FP8, 1978.9e12),
                         (DType.TF32, 494.7e12), (DType.FP32, 66.9e12)))
_TPU_V4 = DeviceSpec(
    # Google Cloud TPU v4 documentation and Jouppi et al. 2023 (ISCA, "TPU v4: An Optically
    # Reconfigurable Supercomputer"): 275 TFLOPS bf16 per chip, 32 GiB HBM2 at 1,200 GB/s;
    # two TensorCores of four 128x128 MXUs each (8 units, 128x128 tiles). No published TPU v4
    # matmul or attention microbenchmark is cited here: the GEMM efficiency 0.80 and the
    # attention efficiencies 0.60 / 0.50 are ASSUMPTIONS of the order GPU kernels reach;
    # calibrate (`nest-cp calibrate`) before trusting absolute TPU predictions.
    name="tpuv4", peak_flops=275e12, mem_bandwidth_Bps=1.2e12, hbm_bytes=32 * GiB,
    compute_units=8, gemm_tiles=((128, 128),), gemm_efficiency=0.80,
    attention_fwd_efficiency=0.60, attention_bwd_efficiency=0.50,
    attention_seq_half=_FA3_SEQ_HALF, memory_efficiency=0.90,
    peak_flops_by_dtype=((DType.BF16, 275e12),))

# NVIDIA H200 datasheet: the H100's GH100 compute (989.4 TFLOPS bf16 dense, 132 SMs),
# 141 GB HBM3e at 4.8 TB/s. MAMF 794.5 TFLOP/s (80.3 %, ml-engineering, "H100/H200 SXM");
# attention as the H100 (same SMs and clocks; flash attention is compute-bound).
_H200_SXM = replace(_H100_SXM, name="h200-sxm", mem_bandwidth_Bps=4.8e12,
                    hbm_bytes=141 * 10**9,
                    gemm_efficiency=_gh100_gemm_efficiency(0.803, _H100_GEMM_FIXED_S))
# NVIDIA A100 Tensor Core GPU datasheet (80 GB SXM): BF16 312 TFLOPS dense, TF32 156,
# FP32 19.5; HBM2e 2,039 GB/s; 80 GB; 108 SMs. MAMF 267.9 TFLOP/s at 6912x16384x2048;
# FlashAttention-2: 73 % forward, 63 % backward.
_A100_80GB = DeviceSpec(
    name="a100-80gb", peak_flops=312e12, mem_bandwidth_Bps=2.039e12, hbm_bytes=80 * 10**9,
    compute_units=108, gemm_tiles=_GPU_TILES,
    gemm_efficiency=gemm_efficiency_from_benchmark(267.9 / 312, 6912, 16384, 108, _GPU_TILES),
    attention_fwd_efficiency=0.73 * _FA3_AT_16K, attention_bwd_efficiency=0.63 * _FA3_AT_16K,
    attention_seq_half=_FA3_SEQ_HALF, memory_efficiency=0.90,
    peak_flops_by_dtype=((DType.BF16, 312e12), (DType.TF32, 156e12), (DType.FP32, 19.5e12)))

# ------------------------------------------------------------------ calibration
# Calibration. `nest-cp calibrate reports/fidelity/data/vtrain_single.csv
# --device a100-80gb --train-shapes 1024x12,1024x20,2048x16,2048x24` (10 Levenberg-Marquardt
# iterations, the command's default; refitted under cost model v3, whose NVLink efficiency
# 0.767 prices the runs' TP collectives slower: fitted GEMM 0.8309, memory 0.8557, 69.93 us
# per kernel, held-out mean error 6.9% against 44.2% uncalibrated; before v3 0.8215, 0.8612,
# 70.69 us; the calibration set:
# vTrain's 1,440 measured single-node A100 runs, reports/fidelity/data/README.md; fitted on
# four of its eight model shapes, reported on the other four in reports/fidelity/README.md)
# fits these relative parameters of the A100: each efficiency as a sustained fraction of its
# microbenchmark figure above, and the fixed time per kernel launched inside a training step.
# Relative standard errors in the comments; "kept": the set does not constrain it (its
# runs use materialised attention), so the microbenchmark figure stays.
A100_FIT = MappingProxyType({
    "gemm_efficiency": 0.8309 / 0.8586538,  # 0.9677 of MAMF's, standard error 1.6%
    "attention_fwd_efficiency": 1.0,  # kept
    "attention_bwd_efficiency": 1.0,  # kept
    "memory_efficiency": 0.8557 / 0.90,  # 0.9508 of the assumed 0.90, standard error 3.1%
    "kernel_fixed_s": 69.93e-6,  # standard error 0.6%
})
_A100_FIT_RECORD = {
    "source": "reports/fidelity/data/vtrain_single.csv (vTrain single-node A100 runs)",
    "train_shapes": "1024x12, 1024x20, 2048x16, 2048x24",
    "test_shapes": "1024x16, 1024x24, 2048x12, 2048x20",
    "std_error_relative": {"gemm_efficiency": 0.0163, "memory_efficiency": 0.0310,
                           "kernel_fixed_s": 0.0058},
    "not_constrained": ["attention_fwd_efficiency", "attention_bwd_efficiency"]}


def sustained(device: DeviceSpec, fit: Mapping[str, float], name: str,
              record: Mapping[str, object]) -> DeviceSpec:
    """``device`` with each efficiency times its sustained fraction in ``fit`` (at most 1)
    and ``fit``'s fixed time per kernel; ``record`` says where the fit comes from."""
    values = {key: min(1.0, getattr(device, key) * fraction)
              for key, fraction in fit.items() if key != "kernel_fixed_s"}
    calibrated = device.with_efficiencies(kernel_fixed_s=fit["kernel_fixed_s"], **values)
    return replace(calibrated, name=name, calibration=tuple(
        (key, json.dumps(value, sort_keys=True)) for key, value in sorted(record.items())))


def _transferred(device: DeviceSpec) -> DeviceSpec:
    """A GPU with the A100's relative parameters, not fitted to its own runs."""
    return sustained(device, A100_FIT, device.name, {
        **_A100_FIT_RECORD, "transferred_from": "a100-80gb",
        "note": "the A100 fit's sustained fractions applied to this GPU's own "
                "microbenchmark figures, and the A100's fixed time per kernel; not fitted "
                "to runs on this GPU"})


DEVICES: Mapping[str, DeviceSpec] = MappingProxyType({
    # Calibrated on the A100 set; the H100 and H200 carry the same relative parameters.
    "a100-80gb": sustained(_A100_80GB, A100_FIT, "a100-80gb",
                           {**_A100_FIT_RECORD, "fitted": "on four of the eight shapes"}),
    "h100-sxm": _transferred(_H100_SXM),
    "h200-sxm": _transferred(_H200_SXM),
    # The same GPUs with microbenchmark figures only (no calibration).
    "a100-80gb-uncalibrated": replace(_A100_80GB, name="a100-80gb-uncalibrated"),
    "h100-sxm-uncalibrated": replace(_H100_SXM, name="h100-sxm-uncalibrated"),
    "h200-sxm-uncalibrated": replace(_H200_SXM, name="h200-sxm-uncalibrated"),
    # NVIDIA DGX B200 / HGX B200 datasheets: 2.25 PFLOPS bf16 dense per GPU (4.5 with
    # sparsity), 4.5 PFLOPS fp8 dense, 180 GB HBM3e at 8 TB/s, 148 SMs. MAMF 1745.0 TFLOP/s
    # (77.6 %, ml-engineering; shape not recorded, so taken as fully quantised). No B200 bf16
    # attention microbenchmark is cited: the H100 FlashAttention-3 fractions are ASSUMED.
    "b200": DeviceSpec(
        name="b200", peak_flops=2250e12, mem_bandwidth_Bps=8.0e12, hbm_bytes=180 * 10**9,
        compute_units=148, gemm_tiles=_GPU_TILES, gemm_efficiency=1745.0 / 2250,
        attention_fwd_efficiency=_H100_SXM.attention_fwd_efficiency,
        attention_bwd_efficiency=_H100_SXM.attention_bwd_efficiency,
        attention_seq_half=_FA3_SEQ_HALF, memory_efficiency=0.90,
        peak_flops_by_dtype=((DType.BF16, 2250e12), (DType.FP8, 4500e12))),
    "tpuv4": _TPU_V4,
    # NEST's "TPUv4-like" device: TPU v4 compute with 64 GiB HBM (DESIGN §6).
    "nest-tpuv4": replace(_TPU_V4, name="nest-tpuv4", hbm_bytes=64 * GiB),
    # NEST's H100 setup: H100 SXM compute with 90 GiB HBM (DESIGN §6).
    "nest-h100": replace(_H100_SXM, name="nest-h100", hbm_bytes=90 * GiB),
})

# ------------------------------------------------------------------ networks


@dataclass(frozen=True, slots=True)
class TierSpec:
    """A tier of a preset network; ``size`` None: as many as N needs (outermost tier only)."""

    name: str
    size: int | None
    bandwidth_Bps: float
    latency_s: float
    efficiency: float = 1.0  # the fraction of bandwidth_Bps collectives reach (§5 b)


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
                 spec.bandwidth_Bps, spec.latency_s, spec.efficiency)
            for spec in self.tiers))


# Link efficiencies: nccl-tests ring all-reduce bus bandwidth over the link's peak per
# direction, rounded to three digits (module docstring, docs/cost-model.md §5 b). Each figure
# is an NCCL maintainer's answer on GitHub.
# NVLink 4 (H100, 450 GB/s): "NCCL can get an effective NVLink bandwidth of 370GB/s ... when
# running with NCCL_ALGO=RING" (@sjeaugey, github.com/NVIDIA/nccl-tests/issues/212):
# 370 / 450. The NVLink SHARP (NVLS) all-reduce reports ~480 GB/s there, not a ring's figure.
_NVLINK4_EFFICIENCY = 0.822
# NVLink 3 (A100, 300 GB/s): "some other bottlenecks on the GPUs limits it to ~230GB/s"
# (@sjeaugey, github.com/NVIDIA/nccl-tests/issues/149): 230 / 300.
_NVLINK3_EFFICIENCY = 0.767
# InfiniBand NDR 400 Gb/s (ConnectX-7, 50 GB/s): "For NDR @ 400Gbps you should see
# 46-48GB/s per NIC" (@AddyLaddy, github.com/NVIDIA/nccl-tests/issues/290): the middle,
# 47 / 50. The same ConnectX-7 at 400 Gb/s over RoCE reaches "up to 48-49GB/s per NIC"
# (issues/267), so the figure also serves the RoCE preset, on the low side.
_NDR400_EFFICIENCY = 0.94
# InfiniBand HDR 200 Gb/s (ConnectX-6, 25 GB/s): "On an Nvidia DGX-A100 system we have
# 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW" (@AddyLaddy,
# github.com/NVIDIA/nccl/issues/812, quoted in issues/1576): 192 / 8 = 24 of 25 GB/s per NIC.
_HDR200_EFFICIENCY = 0.96

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
        description="DGX H100 SuperPOD: NVLink 8 GPUs at 450 GB/s per direction, 8 x NDR 400 "
                    "Gb/s per node (one per GPU), rail-optimised leaf (32 nodes) and spine, "
                    "1 / 2 / 3 us",
        default_device="h100-sxm",
        tiers=(TierSpec("nvlink", 8, 450e9, 1e-6, _NVLINK4_EFFICIENCY),
               TierSpec("leaf", 32, 50e9, 2e-6, _NDR400_EFFICIENCY),
               TierSpec("spine", None, 50e9, 3e-6, _NDR400_EFFICIENCY))),
    # NVIDIA DGX A100 (DGX A100 System Architecture, WP-10083-001, and datasheet): 8 A100 SXM
    # on six NVSwitches, NVLink 3 at 12 links x 25 GB/s = 300 GB/s per direction (600 GB/s
    # bidirectional, the datasheet figure); eight single-port ConnectX-6 HDR 200 Gb/s
    # InfiniBand adapters for compute, one per GPU (25e9 B/s per direction) on a non-blocking
    # fabric. Latencies 1 / 2 us: assumptions, as for the H100 SuperPOD.
    "dgx-a100": NetworkPreset(
        name="dgx-a100",
        description="DGX A100 nodes: NVLink 8 GPUs at 300 GB/s per direction, HDR 200 Gb/s "
                    "InfiniBand per GPU, 1 / 2 us",
        default_device="a100-80gb",
        tiers=(TierSpec("nvlink", 8, 300e9, 1e-6, _NVLINK3_EFFICIENCY),
               TierSpec("fabric", None, 25e9, 2e-6, _HDR200_EFFICIENCY))),
    # NVIDIA DGX SuperPOD with DGX A100 (the design of NVIDIA's Selene; DGX SuperPOD Reference
    # Architecture for DGX A100): the DGX A100 nodes above (NVLink 3, 300 GB/s per direction;
    # eight HDR 200 Gb/s compute ports per node, one per GPU, 25e9 B/s) in scalable units of
    # 20 nodes (160 GPUs) on a rail-optimised, non-blocking HDR fat tree: leaf tier = one
    # scalable unit, spine above, both at the per-GPU 25e9 B/s. The unit size is the reference
    # architecture's; latencies 1 / 2 / 3 us are assumptions, as for the H100 SuperPOD.
    "dgx-a100-superpod": NetworkPreset(
        name="dgx-a100-superpod",
        description="DGX A100 SuperPOD (Selene): NVLink 8 GPUs at 300 GB/s per direction, "
                    "8 x HDR 200 Gb/s per node (one per GPU), scalable units of 20 nodes and a "
                    "spine, 1 / 2 / 3 us",
        default_device="a100-80gb",
        tiers=(TierSpec("nvlink", 8, 300e9, 1e-6, _NVLINK3_EFFICIENCY),
               TierSpec("su", 20, 25e9, 2e-6, _HDR200_EFFICIENCY),
               TierSpec("spine", None, 25e9, 3e-6, _HDR200_EFFICIENCY))),
    # Meta's Llama 3 training cluster (Dubey et al. 2024, arXiv 2407.21783, §3.3.1): H100 SXM
    # servers of 8 GPUs on NVLink (450 GB/s per direction, as the SuperPOD), one 400 Gb/s
    # RoCE NIC per GPU (50e9 B/s), a three-layer Clos: 16 GPUs (2 servers) per rack switch,
    # 192 racks (3,072 GPUs) per pod at full bisection, pods joined by an aggregation layer
    # oversubscribed 1:7 (50e9 / 7 B/s per GPU). Latencies 1 / 2 / 3 / 5 us: assumptions.
    "meta-h100-roce": NetworkPreset(
        name="meta-h100-roce",
        description="Llama 3's RoCE cluster: NVLink 8 GPUs at 450 GB/s, 400 Gb/s per GPU to "
                    "racks of 16 and pods of 3,072 at full bisection, 1:7 above the pod",
        default_device="h100-sxm",
        tiers=(TierSpec("nvlink", 8, 450e9, 1e-6, _NVLINK4_EFFICIENCY),
               TierSpec("rack", 2, 50e9, 2e-6, _NDR400_EFFICIENCY),
               TierSpec("pod", 192, 50e9, 3e-6, _NDR400_EFFICIENCY),
               TierSpec("aggregation", None, 50e9 / 7, 5e-6, _NDR400_EFFICIENCY))),
})

# ------------------------------------------------------------------ builders


def _lookup(registry: Mapping, name: object, field: str = "preset"):
    if not isinstance(name, str) or name not in registry:
        raise InstanceFormatError(f"expected one of {', '.join(sorted(registry))}, got {name!r}",
                                  field=field)
    return registry[name]


def resolve_device(device: object, base_dir: Path | None = None) -> DeviceSpec:
    """A preset device by name, or a device file (``*.json``/``*.yaml``, e.g. calibrated)."""
    from nest_cp.profiles.devicefile import is_device_path, load_device

    if is_device_path(device):
        return load_device((base_dir or Path(".")) / str(device))
    return _lookup(DEVICES, device, "device")


def microbenchmark_base(device: DeviceSpec) -> DeviceSpec:
    """The microbenchmark-only preset a shipped calibrated preset was built from (its
    ``-uncalibrated`` twin), or ``device`` itself."""
    return DEVICES.get(f"{device.name}-uncalibrated", device)


def _device_for(network: NetworkPreset, device: str | None,
                base_dir: Path | None = None) -> DeviceSpec:
    return resolve_device(network.default_device if device is None else device, base_dir)


def network_cluster(network: str, devices: int, device: str | None = None,
                    hbm_reserve: float = 0.0, base_dir: Path | None = None) -> Cluster:
    """The preset network sized for ``devices``, HBM from ``device`` or the network's default."""
    preset = _lookup(NETWORKS, network)
    if not (isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1):
        raise InstanceFormatError(f"expected an integer >= 1, got {devices!r}",
                                  field="num_devices")
    spec = _device_for(preset, device, base_dir)
    return Cluster(num_devices=devices, hbm_bytes=spec.hbm_bytes, network=preset.build(devices),
                   hbm_reserve=hbm_reserve, name=f"{network}-{devices}",
                   peak_flops_per_s=spec.peak_flops)


def default_tp_widths(model: TransformerSpec, devices: int) -> tuple[int, ...]:
    """Powers of two up to the devices of a node that divide the (kv) heads and fit N."""
    heads = model.num_heads if model.latent_attention is not None else model.kv_heads
    return tuple(width for width in (1, 2, 4, 8)
                 if width <= min(DEVICES_PER_NODE, devices) and heads % width == 0)


def default_ep_widths(model: TransformerSpec, devices: int) -> tuple[int, ...]:
    """(1,) for dense models; powers of two up to 64 dividing the experts for MoE models."""
    if not model.is_moe:
        return (1,)
    return tuple(width for width in (1, 2, 4, 8, 16, 32, 64)
                 if width <= devices and model.num_experts % width == 0)


def _configs(tp_widths: tuple[int, ...], ep_widths: tuple[int, ...],
             devices: int | None, cp_widths: tuple[int, ...] = (1,),
             spec: TransformerSpec | None = None,
             options: ProfileOptions | None = None) -> tuple[IntraConfig, ...]:
    """Every (tp, ep, cp) triple whose replica fits in ``devices`` (None: no limit); with
    c > 1 under a2a, without the (t, c) pairs whose heads do not split (logged)."""
    configs = tuple(IntraConfig(tp, ep, cp) for tp in tp_widths for ep in ep_widths
                    for cp in cp_widths if devices is None or tp * ep * cp <= devices)
    if not configs:
        raise InstanceFormatError(f"expected a tp x ep x cp width within {devices} devices, "
                                  f"got tp {list(tp_widths)}, ep {list(ep_widths)}, cp "
                                  f"{list(cp_widths)}", field="tp")
    if spec is not None and any(config.cp > 1 for config in configs):
        configs = context_configs(spec, configs, options or ProfileOptions())
        for cp in cp_widths:
            if not any(config.cp == cp for config in configs):
                raise InstanceFormatError(
                    f"expected a tensor width whose heads split over {cp} context ranks "
                    f"under a2a, got tp {list(tp_widths)}", field="training.context_parallel")
    return configs


def profile_model(spec: TransformerSpec, device: DeviceSpec, training: TrainingSetup,
                  configs: tuple[IntraConfig, ...],
                  options: ProfileOptions | None = None) -> Workload:
    """Profile ``spec`` for ``training`` (warning when a calibrated device extrapolates)."""
    from nest_cp.profiles.devicefile import warn_outside_calibration

    warn_outside_calibration(device, spec.hidden, training.seq_len, spec.name)
    return profile_workload(spec, device, training.seq_len, training.microbatches, configs,
                            options)


def build_instance(model: str | TransformerSpec, devices: int, network: str,
                   device: str | None = None, global_batch: int = 4096,
                   seq_len: int | None = None, microbatches: tuple[int, ...] = (1,),
                   tp_widths: tuple[int, ...] | None = None,
                   ep_widths: tuple[int, ...] | None = None,
                   zero_stages: tuple[int, ...] = (0, 1, 2, 3),
                   recompute_modes: tuple[RecomputeMode, ...] = (RecomputeMode.NONE,
                                                                 RecomputeMode.FULL),
                   name: str | None = None, optimizer: Optimizer = MEGATRON_ADAM,
                   options: ProfileOptions | None = None,
                   cp_widths: tuple[int, ...] = (1,)) -> Instance:
    """An instance of a model (preset name or spec) on a preset network of ``devices`` devices.

    Defaults: the model's sequence length, Megatron-LM's 18 B/parameter Adam (2/4/12), ZeRO
    0-3 (1 = Megatron's distributed optimizer), flash attention without sequence
    parallelism, tensor widths 1..8 dividing the (kv) heads, expert widths dividing the
    experts, no context parallelism (``cp_widths`` (1,); ``options.cp_comm`` says how wider
    contexts communicate).
    """
    spec = model if isinstance(model, TransformerSpec) else _lookup(MODELS, model, "model")
    options = options or ProfileOptions()
    cluster = network_cluster(network, devices, device)
    device_spec = _device_for(NETWORKS[network], device)
    training = TrainingSetup(global_batch=global_batch,
                             seq_len=spec.default_seq_len if seq_len is None else seq_len,
                             microbatches=tuple(microbatches), zero_stages=tuple(zero_stages),
                             recompute_modes=tuple(recompute_modes), optimizer=optimizer,
                             context_parallel=tuple(cp_widths), cp_comm=options.cp_comm)
    tp = default_tp_widths(spec, devices) if tp_widths is None else tuple(tp_widths)
    ep = default_ep_widths(spec, devices) if ep_widths is None else tuple(ep_widths)
    workload = profile_model(spec, device_spec, training,
                             _configs(tp, ep, devices, tuple(cp_widths), spec, options), options)
    return Instance(workload=workload, cluster=cluster, training=training,
                    name=name or f"{spec.name}-{network}-{devices}")


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


_WORKLOAD_OPTIONS = {"device", "tp", "ep", "attention", "sequence_parallel"}


def profile_options(options: dict) -> ProfileOptions:
    """``attention`` (flash | materialized) and ``sequence_parallel`` of a workload section."""
    kwargs = {}
    if "attention" in options:
        try:
            kwargs["attention"] = AttentionKind(options["attention"])
        except ValueError:
            raise InstanceFormatError(
                "expected one of " + ", ".join(repr(k.value) for k in AttentionKind)
                + f", got {options['attention']!r}", field="attention") from None
    if "sequence_parallel" in options:
        if not isinstance(options["sequence_parallel"], bool):
            raise InstanceFormatError(f"expected true or false, got "
                                      f"{options['sequence_parallel']!r}",
                                      field="sequence_parallel")
        kwargs["sequence_parallel"] = options["sequence_parallel"]
    return ProfileOptions(**kwargs)


def _workload_for(spec: TransformerSpec, options: dict, training: TrainingSetup,
                  base_dir: Path | None) -> Workload:
    device = resolve_device(options.get("device", "h100-sxm"), base_dir)
    tp = _int_list(options, "tp") or default_tp_widths(spec, DEVICES_PER_NODE)
    ep = _int_list(options, "ep") or default_ep_widths(spec, spec.num_experts)
    # one profile per allowed context width, communicating as the training setup says
    profiling = replace(profile_options(options), cp_comm=training.cp_comm)
    configs = _configs(tp, ep, None, training.context_parallel, spec, profiling)
    return profile_model(spec, device, training, configs, profiling)


def workload_from_preset(name: str, options: dict, training: TrainingSetup,
                         base_dir: Path | None = None) -> Workload:
    """A preset model profiled for ``training``.

    Options: ``device`` (a preset name or a device file; default ``h100-sxm``), ``tp``,
    ``ep`` (default: the widths of :func:`build_instance`, not limited by a device count,
    which a workload does not know), ``attention`` and ``sequence_parallel``.
    """
    spec = _lookup(MODELS, name)
    _check_options(options, _WORKLOAD_OPTIONS)
    return _workload_for(spec, options, training, base_dir)


def workload_from_model(kind: str, value: object, options: dict, training: TrainingSetup,
                        base_dir: Path | None = None) -> Workload:
    """A workload from a ``transformer`` description or an ``hf_config`` (mapping or path).

    Options as :func:`workload_from_preset`.
    """
    from nest_cp.model.documents import read_document
    from nest_cp.profiles.hfconfig import spec_from_description, spec_from_hf_config

    _check_options(options, _WORKLOAD_OPTIONS)
    if kind == "transformer":
        spec = spec_from_description(value, prefix="transformer")
    elif isinstance(value, str):
        path = (base_dir or Path(".")) / value
        try:
            spec = spec_from_hf_config(read_document(path), name=Path(value).stem)
        except InstanceFormatError as exc:
            if exc.file is not None:
                raise
            raise InstanceFormatError(exc.detail, file=str(path), field=exc.field) from None
    else:
        spec = spec_from_hf_config(value, prefix="hf_config")
    return _workload_for(spec, options, training, base_dir)


def cluster_from_preset(name: str, options: dict, base_dir: Path | None = None) -> Cluster:
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
    return network_cluster(name, options["num_devices"], device, float(reserve), base_dir)
