"""nest-cp: network-aware planning of distributed training, certified by exact solvers."""

from nest_cp.cost.evaluate import ChunkReport, Evaluation, Evaluator, StageReport, evaluate
from nest_cp.io.readers import instance_from_dict, load_instance, load_plan, plan_from_dict
from nest_cp.io.writers import instance_to_dict, plan_to_dict, save_instance, save_plan
from nest_cp.model.errors import (
    InfeasibleInstance,
    InstanceFormatError,
    InvalidPlan,
    NestCpError,
    PlanFormatError,
)
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
from nest_cp.model.network import NetworkModel, Path, to_ticks
from nest_cp.model.plan import (
    MEGATRON_LAYOUT,
    NEST_LAYOUT,
    Dim,
    Plan,
    RankLayout,
    SdpMask,
    Stage,
    all_layouts,
    context_groups,
)
from nest_cp.model.result import SolveResult, Space, Status

__version__ = "0.1.0"

__all__ = [
    "MEGATRON_LAYOUT", "NEST_LAYOUT", "ChunkReport", "Cluster", "Collective", "CollectiveGroup",
    "CollectiveKind", "CpComm", "Dim", "Evaluation", "Evaluator", "GraphNetwork",
    "HierarchicalNetwork",
    "InfeasibleInstance", "Instance", "InstanceFormatError", "IntraConfig", "InvalidPlan",
    "Layer", "LayerProfile", "Link", "NestCpError", "NetworkModel", "Optimizer", "Path",
    "Phase", "Plan", "PlanFormatError", "RankLayout", "RecomputeMode", "SdpLevel", "SdpMask",
    "SdpMasking", "SdpSetup", "SolveResult", "Space", "Stage", "StageReport", "Status",
    "Strategy", "Tier", "TrainingSetup", "Workload", "all_layouts", "context_groups",
    "evaluate", "instance_from_dict", "instance_to_dict", "load_instance", "load_plan",
    "plan_from_dict", "plan_to_dict", "save_instance", "save_plan", "to_ticks",
]
