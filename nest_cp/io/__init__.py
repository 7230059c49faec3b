"""Instance and plan files: readers (:mod:`.readers`) and writers (:mod:`.writers`).

Layer: above the model and the profiles (an instance file may name a preset model, device
or network, which :mod:`nest_cp.profiles.presets` expands), below the cost model.  The
document primitives :func:`read_document` and :func:`write_document` live in
:mod:`nest_cp.model.documents` and are re-exported here.
"""

from nest_cp.io.readers import instance_from_dict, load_instance, load_plan, plan_from_dict
from nest_cp.io.writers import (
    cluster_to_dict,
    instance_to_dict,
    plan_to_dict,
    save_instance,
    save_plan,
    training_to_dict,
    workload_to_dict,
)
from nest_cp.model.documents import LongInteger, read_document, write_document

__all__ = ["LongInteger", "cluster_to_dict", "instance_from_dict", "instance_to_dict",
           "load_instance", "load_plan", "plan_from_dict", "plan_to_dict", "read_document",
           "save_instance", "save_plan", "training_to_dict", "workload_to_dict",
           "write_document"]
