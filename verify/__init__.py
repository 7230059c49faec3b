"""Certification harness: run the backends on benchmark instances, certify the DP, write tables.

``nest-cp verify`` (:func:`nest_cp.verify.cli.verify_command`) and ``nest-cp table``
(:func:`nest_cp.verify.cli.table_command`) are the command-line entry points; the
functions below are the same steps as a library.
"""

from nest_cp.verify.certify import (
    algorithmic_certificate,
    consistency_failures,
    reference_failures,
    structural_gap,
)
from nest_cp.verify.harness import HarnessOptions, Task, discover, run_tasks, verify_instance
from nest_cp.verify.tables import render, results_document

__all__ = [
    "HarnessOptions", "Task", "algorithmic_certificate", "consistency_failures", "discover",
    "reference_failures", "render", "results_document", "run_tasks", "structural_gap",
    "verify_instance",
]
