"""Turn a plan into what a training launcher runs: Megatron-LM, torchtitan, DeepSpeed.

Layer: reads plans, instances and the evaluator (to check the plan fits the
instance); nothing here imports a backend or the harness.  Everything an
exporter reads from a plan goes through :func:`nest_cp.cli.export.view.plan_view`,
the one adapter to the plan format.  Every choice a target cannot express is a
warning in the result, never dropped.
"""

from __future__ import annotations

from nest_cp.cli.export.common import ExportFormat, ExportResult
from nest_cp.cli.export.deepspeed import export_deepspeed
from nest_cp.cli.export.megatron import export_megatron
from nest_cp.cli.export.ranks import default_gpus_per_node, launch_table
from nest_cp.cli.export.torchtitan import export_torchtitan
from nest_cp.cli.export.view import PlanView, plan_view
from nest_cp.model.instance import Instance
from nest_cp.model.plan import Plan

_EXPORTERS = {ExportFormat.MEGATRON: export_megatron,
              ExportFormat.TORCHTITAN: export_torchtitan,
              ExportFormat.DEEPSPEED: export_deepspeed}


def export_plan(instance: Instance, plan: Plan, fmt: ExportFormat | str,
                gpus_per_node: int | None = None, plan_file: str | None = None) -> ExportResult:
    """Export ``plan`` for ``fmt``; hosts hold ``gpus_per_node`` devices (default tier 0).

    Raises PlanFormatError (naming ``plan_file``) when the plan does not fit the
    instance and BackendOptionError when the host size is missing or invalid.
    """
    view = plan_view(instance, plan, plan_file)
    return _EXPORTERS[ExportFormat(fmt)](view, default_gpus_per_node(instance, gpus_per_node))


__all__ = ["ExportFormat", "ExportResult", "PlanView", "export_plan", "launch_table",
           "plan_view"]
