"""Draw a plan: its placement on the network and its per-stage time and memory (matplotlib).

Layer: beside :mod:`nest_cp.cli.report` (reads an evaluation, draws it); only the
CLI's ``show`` calls it.  The Agg backend is selected, so no display is needed.

Left panel, the placement: every device is a square coloured by the stage it
runs (grey and hatched when idle), every other data-parallel replica in a lighter
shade of it, so replicas (and their tensor groups) stay apart where one stage fills
the cluster.  The legend has one entry per stage (up to DISCRETE_STAGES stages,
beyond that a colour bar).  Squares of one node (the innermost tier's
domain, or a graph cluster) form a row; the nodes of one tier-1 domain form a
block; blocks are tiled with gaps.  Two overlays show the communication the
plan pays for: the pipeline path of replica 0 (intra-stage rank 0), stage by
stage, as arrows; the data-parallel group of stage 0 (rank 0) as ringed
squares.  Up to 128 devices each square is labelled with its stage and replica;
beyond, each stage is labelled where replica 0's pipeline passes it.

Right panels: each stage's time per microbatch, split into compute (with
recompute), intra-layer collectives, pipeline transfers and ZeRO-3 gathers, and
each stage's memory per device against the usable HBM; the x-axis has one tick per
stage (a single stage is one bar at 0, not an axis from -0.4 to 0.4).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

from nest_cp.cli.report import GIB, device_groups
from nest_cp.cost.evaluate import Evaluation
from nest_cp.model.documents import write_output
from nest_cp.model.instance import HierarchicalNetwork, Instance

LABEL_LIMIT = 128      # devices up to which every square carries its stage and replica
ROW_WIDTH_LIMIT = 16   # a node wider than this wraps onto several rows
DISCRETE_STAGES = 20   # up to this many stages get distinct colours, beyond a colour map
BLOCK_ROW_LIMIT = 16   # a block taller than this many rows is cut into parts
STAGE_LABEL_LIMIT = 64  # beyond LABEL_LIMIT devices, stages are labelled up to this many
LIGHTER = 0.4          # every other replica: its stage colour this far towards white


@dataclass(frozen=True, slots=True)
class _Block:
    """A tier-1 domain (or graph cluster) drawn as rows of device squares."""

    label: str
    rows: tuple[tuple[int, ...], ...]
    row_labels: tuple[str, ...]  # the node each row starts ("" for a wrapped continuation)


def _blocks(instance: Instance) -> list[_Block]:
    """Nodes as rows, grouped into tier-1 domains (hierarchical) or clusters (graph).

    A block taller than BLOCK_ROW_LIMIT rows is cut into parts, labelled ``name i.k``.
    """
    count = instance.cluster.num_devices
    network = instance.cluster.network
    if not isinstance(network, HierarchicalNetwork):
        blocks = []
        for group in device_groups(instance):
            rows, labels = _wrap([(group.devices, "")])
            blocks.append(_Block(group.label, rows, labels))
        return blocks
    tiers = network.tiers
    node = tiers[0].size
    per_block = node * tiers[1].size if len(tiers) > 1 else node
    name = tiers[1].name if len(tiers) > 1 else tiers[0].name
    blocks = []
    for index in range(math.ceil(count / per_block)):
        devices = range(index * per_block, min(count, (index + 1) * per_block))
        rows, labels = _wrap([(tuple(devices[start:start + node]),
                               f"{tiers[0].name} {(devices[start]) // node}")
                              for start in range(0, len(devices), node)])
        parts = range(0, len(rows), BLOCK_ROW_LIMIT)
        for part, start in enumerate(parts):
            label = f"{name} {index}" + (f".{part}" if len(parts) > 1 else "")
            blocks.append(_Block(label, rows[start:start + BLOCK_ROW_LIMIT],
                                 labels[start:start + BLOCK_ROW_LIMIT]))
    return blocks


def _wrap(rows: list[tuple[tuple[int, ...], str]]) -> tuple[tuple, tuple[str, ...]]:
    """Rows wider than ROW_WIDTH_LIMIT wrapped; the label stays with a row's first part."""
    wrapped, labels = [], []
    for row, label in rows:
        for start in range(0, len(row), ROW_WIDTH_LIMIT):
            wrapped.append(row[start:start + ROW_WIDTH_LIMIT])
            labels.append(label if start == 0 else "")
    return tuple(wrapped), tuple(labels)


def _layout(blocks: list[_Block]) -> tuple[dict[int, tuple[float, float]], list, float, float]:
    """Device -> square origin, block frames, and the total width and height."""
    width = max(len(row) for block in blocks for row in block.rows)
    height = max(len(block.rows) for block in blocks)
    gap = 1.0
    # columns so that the panel is about twice as wide as high
    columns = max(1, min(len(blocks), round(math.sqrt(2 * len(blocks) * (height + gap)
                                                       / (width + gap)))))
    origin, frames = {}, []
    for index, block in enumerate(blocks):
        column, line = index % columns, index // columns
        x0, y0 = column * (width + gap), line * (height + gap + 0.6)
        frames.append((x0, y0, width, len(block.rows), block.label))
        for r, row in enumerate(block.rows):
            for c, device in enumerate(row):
                origin[device] = (x0 + c, y0 + r)
    lines = math.ceil(len(blocks) / columns)
    return origin, frames, columns * (width + gap) - gap, lines * (height + gap + 0.6)


def draw_plan(instance: Instance, evaluation: Evaluation, png: str | Path,
              title: str = "") -> None:
    """Write the figure of the module doc to ``png``."""
    import matplotlib.pyplot as plt

    figure = plan_figure(instance, evaluation, title)
    buffer = io.BytesIO()  # drawn in memory, written through the safe writer
    figure.savefig(buffer, dpi=110, format="png")
    plt.close(figure)
    write_output(png, buffer.getvalue())


def plan_figure(instance: Instance, evaluation: Evaluation, title: str = ""):
    """The figure of the module doc (a matplotlib Figure; the caller closes it).  Its axes
    are the placement, the stage times and the stage memory, in that order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plan = evaluation.plan
    figure = plt.figure(figsize=(17, 9), constrained_layout=True)
    grid = figure.add_gridspec(2, 2, width_ratios=(2.6, 1))
    placement_axis = figure.add_subplot(grid[:, 0])
    time_axis, memory_axis = figure.add_subplot(grid[0, 1]), figure.add_subplot(grid[1, 1])
    colours = _stage_colours(plan.num_stages)
    _draw_placement(placement_axis, instance, evaluation, colours, figure)
    _draw_times(time_axis, instance, evaluation, colours)
    _draw_memory(memory_axis, evaluation, colours)
    figure.suptitle(title or _title(instance, evaluation), fontsize=12)
    return figure


def _title(instance: Instance, evaluation: Evaluation) -> str:
    plan = evaluation.plan
    used, total = plan.num_devices_used, instance.cluster.num_devices
    interleave = f" v={plan.virtual_stages}" if plan.virtual_stages > 1 else ""
    text = (f"{instance.name}: tp={plan.config.tp} ep={plan.config.ep} pp={plan.num_stages}"
            f"{interleave} dp={plan.num_replicas} b={plan.microbatch} zero={plan.zero} on "
            f"{used} of {total} devices")
    if evaluation.objective_ticks is not None:
        text += f" — iteration {evaluation.iteration_time_s * 1e3:.3f} ms"
    return text


def _stage_colours(num_stages: int) -> list:
    import matplotlib

    if num_stages <= 10:
        cmap = matplotlib.colormaps["tab10"]
        return [cmap(s) for s in range(num_stages)]
    if num_stages <= DISCRETE_STAGES:
        cmap = matplotlib.colormaps["tab20"]
        return [cmap(s) for s in range(num_stages)]
    cmap = matplotlib.colormaps["turbo"]
    return [cmap(0.05 + 0.9 * s / (num_stages - 1)) for s in range(num_stages)]


def _draw_placement(axis, instance: Instance, evaluation: Evaluation, colours, figure) -> None:
    plan = evaluation.plan
    blocks = _blocks(instance)
    origin, frames, width, height = _layout(blocks)
    _draw_devices(axis, plan, origin, colours, instance.cluster.num_devices)
    _draw_frames(axis, blocks, origin, frames)
    _draw_pipeline(axis, plan, origin)
    _draw_dp_group(axis, plan, origin)
    if instance.cluster.num_devices > LABEL_LIMIT and 1 < plan.num_stages <= STAGE_LABEL_LIMIT:
        _label_stages(axis, plan, origin, colours)
    axis.set_xlim(-0.5, width + 0.5)
    axis.set_ylim(height + 0.2, -1.0)
    axis.set_aspect("equal")
    axis.axis("off")
    _legend(axis, plan, colours, figure)
    shade = "; every other replica lighter" if plan.num_replicas > 1 else ""
    axis.set_title(f"placement: {_blocks_text(instance, blocks)}; colour = pipeline stage"
                   f"{shade}", fontsize=9)


def _draw_devices(axis, plan, origin, colours, count: int) -> None:
    """One square per device, coloured by stage (hatched grey when idle), labelled if few."""
    from matplotlib.patches import Rectangle

    where = {device: (s, r, j) for s, replicas in enumerate(plan.placement)
             for r, ranks in enumerate(replicas) for j, device in enumerate(ranks)}
    size = 7 if count <= 32 else 4.5
    for device, (x, y) in origin.items():
        if device in where:
            stage, replica, rank = where[device]
            colour = _lighter(colours[stage]) if replica % 2 else colours[stage]
            axis.add_patch(Rectangle((x + 0.04, y + 0.04), 0.92, 0.92,
                                     facecolor=colour, edgecolor="white", lw=0.4))
            text = f"dev {device}\ns{stage} r{replica}" + (
                f" j{rank}" if plan.devices_per_replica > 1 else "")
            ink = _ink(colour)
        else:
            axis.add_patch(Rectangle((x + 0.04, y + 0.04), 0.92, 0.92, facecolor="#eeeeee",
                                     edgecolor="#bbbbbb", hatch="///", lw=0.4))
            text, ink = f"dev {device}\nidle", "#555555"
        if count <= LABEL_LIMIT:
            axis.text(x + 0.5, y + 0.38, text, ha="center", va="center", fontsize=size,
                      color=ink)


def _draw_frames(axis, blocks: list[_Block], origin, frames) -> None:
    """A frame and a label per block; node names beside the rows when there are few rows."""
    from matplotlib.patches import Rectangle

    if sum(len(block.rows) for block in blocks) <= 48:
        for block in blocks:
            for row, label in zip(block.rows, block.row_labels):
                if label:
                    x, y = origin[row[0]]
                    axis.text(x - 0.15, y + 0.5, label, ha="right", va="center", fontsize=7,
                              color="#333333")
    for x0, y0, w, h, label in frames:
        axis.add_patch(Rectangle((x0 - 0.08, y0 - 0.08), w + 0.16, h + 0.16, fill=False,
                                 edgecolor="#555555", lw=0.8))
        if len(frames) <= 64:
            axis.text(x0, y0 - 0.2, label, fontsize=7 if len(frames) <= 32 else 5,
                      va="bottom", ha="left", color="#333333")


def _legend(axis, plan, colours, figure) -> None:
    """Stage colours (or a colour bar beyond DISCRETE_STAGES), idle, and the two overlays."""
    import matplotlib as mpl
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=colours[s], label=f"stage {s}")
               for s in range(plan.num_stages)] if plan.num_stages <= DISCRETE_STAGES else []
    if plan.num_replicas > 1:
        handles.append(Patch(facecolor=_lighter(colours[0]), label="odd replicas (lighter)"))
    handles.append(Patch(facecolor="#eeeeee", edgecolor="#bbbbbb", hatch="///", label="idle"))
    handles += [Line2D([], [], color="black", lw=1.5, marker=">", label="pipeline, replica 0"),
                Line2D([], [], color="black", lw=0, marker="o", markerfacecolor="none",
                       markersize=9, label="data-parallel group, stage 0")]
    axis.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, -0.01),
                ncol=min(8, len(handles)), fontsize=7, frameon=False)
    if plan.num_stages > DISCRETE_STAGES:
        scalar = mpl.cm.ScalarMappable(cmap="turbo",
                                       norm=mpl.colors.Normalize(0, plan.num_stages - 1))
        bar = figure.colorbar(scalar, ax=axis, fraction=0.025, pad=0.01)
        bar.set_label("pipeline stage", fontsize=8)


def _lighter(colour) -> tuple:
    """``colour`` moved LIGHTER of the way towards white (every other replica)."""
    return tuple(channel + (1 - channel) * LIGHTER for channel in colour[:3]) + (1.0,)


def _label_stages(axis, plan, origin, colours) -> None:
    """'s3' beside the device where replica 0's pipeline enters each stage (large clusters,
    whose squares are too small for per-device labels)."""
    for stage in range(plan.num_stages):
        x, y = origin[plan.placement[stage][0][0]]
        axis.text(x + 0.5, y + 0.3, f"s{stage}", ha="center", va="center", fontsize=7,
                  fontweight="bold", color="black", zorder=6,
                  bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.8,
                        "edgecolor": colours[stage], "lw": 0.8})


def _ink(colour) -> str:
    red, green, blue = colour[:3]
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.55 else "white"


def _blocks_text(instance: Instance, blocks: list[_Block]) -> str:
    network = instance.cluster.network
    if not isinstance(network, HierarchicalNetwork):
        return f"{len(blocks)} clusters of the network graph"
    tiers = network.tiers
    node = f"each row a {tiers[0].name} of {tiers[0].size} devices"
    if len(tiers) == 1:
        return node
    return f"{len(blocks)} {tiers[1].name} block{'s' if len(blocks) != 1 else ''}, {node}"


def _centre(origin, device) -> tuple[float, float]:
    """Where overlays attach: the lower part of a square, below its label."""
    x, y = origin[device]
    return x + 0.5, y + 0.75


def _draw_pipeline(axis, plan, origin) -> None:
    path = [plan.placement[stage][0][0] for stage in range(plan.num_stages)]
    for source, target in zip(path, path[1:]):
        (x0, y0), (x1, y1) = _centre(origin, source), _centre(origin, target)
        axis.annotate("", xy=(x1, y1), xytext=(x0, y0),
                      arrowprops={"arrowstyle": "-|>", "color": "black", "lw": 1.2,
                                  "shrinkA": 2, "shrinkB": 2, "alpha": 0.85})


def _draw_dp_group(axis, plan, origin) -> None:
    members = [plan.placement[0][replica][0] for replica in range(plan.num_replicas)]
    xs, ys = zip(*(_centre(origin, device) for device in members))
    axis.scatter(xs, ys, s=60, facecolors="none", edgecolors="black", linewidths=1.3, zorder=5)


def _draw_times(axis, instance: Instance, evaluation: Evaluation, colours) -> None:
    from matplotlib.patches import Patch

    ms = instance.training.tick_s * 1e3
    stages = evaluation.stages
    xs = [s.index for s in stages]
    compute = [(s.compute_ticks + s.recompute_ticks) * ms for s in stages]
    axis.bar(xs, compute, color=[colours[x] for x in xs], edgecolor="white", lw=0.3)
    handles = [Patch(facecolor="white", edgecolor="black", label="compute (stage colour)")]
    bottom = compute
    for label, values, shade in (
            ("collectives", [s.collective_ticks * ms for s in stages], "#444444"),
            ("pipeline p2p", [(s.recv_activation_ticks + s.recv_gradient_ticks) * ms
                              for s in stages], "#888888"),
            ("ZeRO-3 gathers", [s.zero_gather_ticks * ms for s in stages], "#c8c8c8")):
        if not any(values):
            continue
        axis.bar(xs, values, bottom=bottom, color=shade, edgecolor="white", lw=0.3)
        handles.append(Patch(facecolor=shade, label=label))
        bottom = [b + v for b, v in zip(bottom, values)]
    axis.set_ylabel("time per microbatch (ms)", fontsize=8)
    axis.set_xlabel("pipeline stage", fontsize=8)
    axis.tick_params(labelsize=7)
    _stage_ticks(axis, len(stages))
    axis.legend(handles=handles, fontsize=7, frameon=True, framealpha=0.85, loc="lower right")
    tick = instance.training.tick_s
    exposed = ""
    if evaluation.exposed_sync_ticks != evaluation.sync_ticks:
        exposed = f" ({evaluation.exposed_sync_ticks * tick * 1e3:.3f} ms exposed)"
    axis.set_title(f"stage time: max {evaluation.tau_max_ticks * tick * 1e3:.3f} ms per "
                   f"{'chunk and ' if evaluation.plan.virtual_stages > 1 else ''}microbatch, "
                   f"m = {evaluation.num_microbatches}\n"
                   f"gradient sync {evaluation.sync_ticks * tick * 1e3:.3f} ms per iteration"
                   f"{exposed}", fontsize=9)


def _draw_memory(axis, evaluation: Evaluation, colours) -> None:
    stages = evaluation.stages
    xs = [s.index for s in stages]
    values = [s.memory_bytes / GIB for s in stages]
    axis.bar(xs, values, color=[colours[x] if s.fits else "#d62728"
                                for x, s in zip(xs, stages)], edgecolor="white", lw=0.3)
    limit = stages[0].memory_limit_bytes / GIB
    axis.axhline(limit, color="#d62728", lw=1.0, ls="--", label=f"usable HBM {limit:.1f} GiB")
    axis.set_ylabel("memory per device (GiB)", fontsize=8)
    axis.set_xlabel("pipeline stage", fontsize=8)
    axis.tick_params(labelsize=7)
    _stage_ticks(axis, len(stages))
    axis.legend(fontsize=7, frameon=True, framealpha=0.85, loc="lower left")
    over = sum(not s.fits for s in stages)
    axis.set_title("stage memory" + (f" ({over} stages over HBM, red)" if over else ""),
                   fontsize=9)


def _stage_ticks(axis, num_stages: int) -> None:
    """One tick per stage (up to DISCRETE_STAGES, else integer ticks), the bars' full width
    shown: a single stage is one bar at 0."""
    from matplotlib.ticker import MaxNLocator

    pad = 0.6 if num_stages > 2 else 1.0  # one or two bars do not fill the panel
    axis.set_xlim(-pad, num_stages - 1 + pad)
    if num_stages <= DISCRETE_STAGES:
        axis.set_xticks(range(num_stages))
    else:
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
