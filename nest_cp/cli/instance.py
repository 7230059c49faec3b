"""``nest-cp instance``: create, list and inspect instances (presets, HF configs)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path as FsPath

import click

from nest_cp import io
from nest_cp.cli.options import check_writable, int_list
from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import GraphNetwork, HierarchicalNetwork, Instance, TrainingSetup
from nest_cp.model.launchers.search import (
    Launcher,
    context_problem,
    model_problem,
    rules_applied,
)


@click.group()
def instance() -> None:
    """Create, list and inspect instances."""


@instance.command("list")
def instance_list() -> None:
    """List the preset models, devices and networks."""
    from nest_cp.profiles import presets

    for title, table in (("models", presets.MODELS), ("devices", presets.DEVICES),
                         ("networks", presets.NETWORKS)):
        click.echo(f"{title}:")
        for name, spec in table.items():
            click.echo(f"  {name:<22} {_describe(spec)}")


def _describe(spec: object) -> str:
    """The preset's description; for a network, its tiers from the numbers themselves, with
    bandwidth in GB/s (10^9 B/s per device) as ``instance show`` prints it."""
    text = getattr(spec, "description", None)
    text = text if isinstance(text, str) else ""
    tiers = getattr(spec, "tiers", None)
    if not tiers:
        return text
    sizes = " / ".join(f"{t.name} {t.size if t.size is not None else 'rest'}" for t in tiers)
    bandwidths = " / ".join(f"{t.bandwidth_Bps / 1e9:.4g}" for t in tiers)
    efficiencies = " / ".join(f"{t.efficiency:g}" for t in tiers)
    latencies = " / ".join(f"{t.latency_s * 1e6:.4g}" for t in tiers)
    return (f"{text.split(':')[0]}: {sizes}; {bandwidths} GB/s per device at efficiency "
            f"{efficiencies}; {latencies} us; device {spec.default_device}")


@instance.command("new")
@click.option("--model", default=None, help="Preset model (see `instance list`).")
@click.option("--hf-config", "hf_config", default=None, type=click.Path(dir_okay=False),
              help="A Hugging Face config.json to profile instead of a preset model.")
@click.option("--devices", required=True, type=click.IntRange(min=1), help="Device count N.")
@click.option("--network", required=True, help="Preset network (see `instance list`).")
@click.option("--device", default=None,
              help="Preset device or device file (.json); default: the network's.")
@click.option("--global-batch", default=4096, show_default=True, type=click.IntRange(min=1))
@click.option("--seq-len", default=None, type=click.IntRange(min=1),
              help="Sequence length; default: the model's.")
@click.option("--microbatches", default="1", show_default=True, callback=int_list,
              help="Allowed microbatch sizes, e.g. 1,2,4.")
@click.option("--tp-widths", default=None, callback=int_list,
              help="Tensor widths t to profile, e.g. 1,2,4,8,16 (beyond a node); default: "
                   "1..8 dividing the (kv) heads.")
@click.option("--ep-widths", default=None, callback=int_list,
              help="Expert widths e to profile (an MoE model), e.g. 1,2,4,8; default: 1 for a "
                   "dense model, powers of two up to 64 dividing the experts.")
@click.option("--context-parallel", "context_parallel", default="1", show_default=True,
              callback=int_list,
              help="Allowed context widths c (comma-separated; each profiled; the sequence "
                   "must be divisible by 2c). See docs/context-parallelism.md.")
@click.option("--cp-comm", "cp_comm", type=click.Choice(["p2p", "a2a"]), default="p2p",
              show_default=True,
              help="How context ranks exchange attention inputs: a K/V ring (p2p) or "
                   "all-to-alls (a2a, Ulysses; tensor widths whose heads do not split over "
                   "c are dropped with a note).")
@click.option("--attention", type=click.Choice(["flash", "materialized"]), default="flash",
              show_default=True, help="Attention kernel the profile assumes.")
@click.option("--sequence-parallel/--no-sequence-parallel", default=False, show_default=True,
              help="Megatron sequence parallelism with tensor parallelism.")
@click.option("--recompute-modes", default="none,full", show_default=True,
              help="Allowed recomputation modes (none, selective, full).")
@click.option("--virtual-stages", default="1", show_default=True, callback=int_list,
              help="Allowed virtual-stage counts v of interleaved 1F1B, e.g. 1,2,4.")
@click.option("--overlap-grad-reduce/--no-overlap-grad-reduce", default=False,
              show_default=True, help="Gradient reduction overlaps the backward pass "
                                      "(Megatron's --overlap-grad-reduce).")
@click.option("--overlap-param-gather/--no-overlap-param-gather", default=False,
              show_default=True,
              help="ZeRO 1/2's weight all-gather overlaps the next forward pass (Megatron's "
                   "--overlap-param-gather; docs/cost-model.md §5 d).")
@click.option("--tp-comm-overlap/--no-tp-comm-overlap", default=False, show_default=True,
              help="TP collectives overlap the GEMMs where every TP group of a stage replica "
                   "is inside one node (Megatron's --tp-comm-overlap; docs/cost-model.md §5 e).")
@click.option("--launcher", type=click.Choice([k.value for k in Launcher]),
              default=Launcher.MEGATRON.value, show_default=True,
              help="Search only plans this launcher starts as exported and runs as priced "
                   "(its rules are printed by `solve`); none: the cost model's whole space. "
                   "torchtitan implies --overlap-grad-reduce (its FSDP and DDP always "
                   "overlap the reduction).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Instance file to write (.json or .yaml).")
def instance_new(model: str | None, hf_config: str | None, devices: int, network: str,
                 device: str | None, global_batch: int, seq_len: int | None,
                 microbatches: tuple[int, ...], tp_widths: tuple[int, ...],
                 ep_widths: tuple[int, ...], context_parallel: tuple[int, ...], cp_comm: str,
                 attention: str, sequence_parallel: bool,
                 recompute_modes: str, virtual_stages: tuple[int, ...],
                 overlap_grad_reduce: bool, overlap_param_gather: bool, tp_comm_overlap: bool,
                 launcher: str, output: str) -> None:
    """Write an instance built with the analytic profiler from a preset or an HF config.

    The DP and exact backends search only the defaults of --recompute-modes,
    --virtual-stages and --overlap-grad-reduce; `evaluate` and `brute` take any.
    The cost model is described in docs/cost-model.md.
    """

    from nest_cp.model.instance import CpComm, RecomputeMode
    from nest_cp.profiles import presets
    from nest_cp.profiles.hfconfig import spec_from_hf_config
    from nest_cp.profiles.profiler import AttentionKind, ProfileOptions

    if (model is None) == (hf_config is None):
        raise click.UsageError("expected exactly one of --model and --hf-config")
    check_writable(output, inputs=(hf_config, device))  # before profiling, which may take a while
    flags = {"virtual_stages": virtual_stages, "overlap_grad_reduce": overlap_grad_reduce,
             "overlap_param_gather": overlap_param_gather, "tp_comm_overlap": tp_comm_overlap,
             "launcher": Launcher(launcher)}
    if flags["launcher"] is Launcher.TORCHTITAN:  # it always overlaps the reduction
        flags["overlap_grad_reduce"] = True
    TrainingSetup(global_batch=global_batch, seq_len=seq_len or 1,  # refuse them early
                  context_parallel=context_parallel, **flags)
    chosen: object = model
    if hf_config is not None:
        try:
            chosen = spec_from_hf_config(io.read_document(hf_config),
                                         name=FsPath(hf_config).stem)
        except InstanceFormatError as exc:
            if exc.file is not None:
                raise
            raise InstanceFormatError(exc.detail, file=hf_config, field=exc.field) from None
    options = ProfileOptions(attention=AttentionKind(attention),
                             sequence_parallel=sequence_parallel, cp_comm=CpComm(cp_comm))
    try:
        modes = tuple(RecomputeMode(part.strip()) for part in recompute_modes.split(",")
                      if part.strip())
    except ValueError:
        raise click.BadParameter(f"expected modes among none, selective, full, got "
                                 f"{recompute_modes!r}", param_hint="--recompute-modes") from None
    try:
        built = presets.build_instance(model=chosen, devices=devices, network=network,
                                       device=device, global_batch=global_batch,
                                       seq_len=seq_len, microbatches=microbatches,
                                       options=options, recompute_modes=modes,
                                       tp_widths=tp_widths or None, ep_widths=ep_widths or None,
                                       cp_widths=context_parallel)
    except InstanceFormatError as exc:  # an unknown preset name: blame the option given
        option = _PRESET_OPTIONS.get(exc.field or "")
        if exc.file is not None or option is None:
            raise
        raise click.BadParameter(exc.detail, param_hint=option) from None
    built = replace(built, training=replace(built.training, **flags))
    io.save_instance(built, output)
    click.echo(f"wrote {output}: {built.workload.num_layers} layers, "
               f"{built.cluster.num_devices} devices, {len(built.choices)} (config, microbatch) "
               f"choices")
    click.echo("\n".join(_tier_lines(built.cluster.network)))
    click.echo(_overlap_line(built.training))
    click.echo("\n".join(launcher_lines(built)))
    unbuilt = model_problem(built.training.launcher, built.search_facts)
    if unbuilt is not None:  # an answer, not an error: every solve will say "no plan"
        click.echo(f"warning: this instance will have no plan under --launcher {launcher}: "
                   f"{unbuilt}", err=True)
    for width in built.training.context_parallel:
        refused = context_problem(built.launcher, built.search_facts, width)
        if refused is not None:  # the width stays allowed (launcher none may use it)
            click.echo(f"note: no plan of context width {width} runs under --launcher "
                       f"{launcher}: {refused}", err=True)


# the field presets.build_instance blames for an unknown name, and the option that gave it
_PRESET_OPTIONS = {"model": "--model", "preset": "--network", "device": "--device"}


@instance.command("show")
@click.argument("path", type=click.Path(dir_okay=False))
def instance_show(path: str) -> None:
    """Summarise an instance file."""
    inst = io.load_instance(path)
    click.echo(_instance_summary(inst))


def _instance_summary(inst: Instance) -> str:
    cluster, training, workload = inst.cluster, inst.training, inst.workload
    lines = [f"instance   {inst.name}",
             f"workload   {workload.name}: {workload.num_layers} layers, configs "
             + ", ".join(f"tp{c.tp}/ep{c.ep}" + (f"/cp{c.cp}" if c.cp > 1 else "")
                         for c in workload.configs),
             f"cluster    {cluster.name}: {cluster.num_devices} devices, "
             f"{cluster.hbm_bytes / 2**30:.1f} GiB HBM (usable {cluster.usable_hbm_bytes} B)"]
    lines += _tier_lines(cluster.network)
    opt = training.optimizer
    lines.append(f"training   batch {training.global_batch}, seq {training.seq_len}, microbatches "
                 f"{list(training.microbatches)}, ZeRO {list(training.zero_stages)}, recompute "
                 f"{'/'.join(m.value for m in training.recompute_modes)}, virtual stages "
                 f"{list(training.virtual_stages)}, optimizer "
                 f"{opt.weight_bytes}/{opt.grad_bytes}/{opt.state_bytes} B/param, "
                 f"tick {training.tick_s} s")
    lines.append(f"           {_overlap_line(training)}")
    if training.context_parallel != (1,):
        lines.append(f"           context widths {list(training.context_parallel)} "
                     f"({training.cp_comm.value}; docs/context-parallelism.md)")
    lines += launcher_lines(inst)
    return "\n".join(lines)


def launcher_lines(inst: Instance) -> list[str]:
    """The launcher the search is restricted to and each rule it applies, cited."""
    launcher = inst.training.launcher
    if launcher is Launcher.NONE:
        return ["launcher   none: the cost model's whole space (no launcher's rules)"]
    rules = rules_applied(launcher, inst.search_facts)
    return [f"launcher   {launcher.value}: the search keeps plans it starts as exported "
            f"({len(rules)} rules)"] + [f"  - {rule}" for rule in rules]


def _tier_lines(network: HierarchicalNetwork | GraphNetwork) -> list[str]:
    """One line per tier: size, bandwidth per device, the efficiency collectives reach and
    the bandwidth the cost model prices with (docs/cost-model.md §5 b), latency; or a graph's
    counts and link bandwidths.  Bandwidth is in GB/s (10^9 B/s) everywhere."""
    if isinstance(network, GraphNetwork):
        efficiencies = ", ".join(f"{e:g}" for e in sorted({link.efficiency
                                                            for link in network.links}))
        widths = " / ".join(f"{width / 1e9:.4g}"
                            for width in sorted({link.bandwidth_Bps for link in network.links}))
        return [f"  graph: {len(network.switches)} switches, {len(network.links)} links of "
                f"{widths} GB/s, efficiency {efficiencies}"]
    return [f"  tier {index} {tier.name:<10} size {tier.size:<5} "
            f"{tier.bandwidth_Bps / 1e9:>9.4g} GB/s x {tier.efficiency:<5g} = "
            f"{tier.bandwidth_Bps * tier.efficiency / 1e9:>9.4g} GB/s  "
            f"{tier.latency_s * 1e6:>8.4g} us"
            for index, tier in enumerate(network.tiers)]


def _overlap_line(training: TrainingSetup) -> str:
    """The communication-overlap flags of a training setup (docs/cost-model.md §3, §5 d-e)."""
    def state(flag: bool) -> str:
        return "on" if flag else "off"

    return (f"overlap: grad reduce {state(training.overlap_grad_reduce)}, param gather "
            f"{state(training.overlap_param_gather)}, tp comm {state(training.tp_comm_overlap)}")
