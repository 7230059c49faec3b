"""A run's --tp-comm-overlap reaches the evaluator (docs/cost-model.md §5 e), and the fidelity
report sets it on exactly the rows whose source states it."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

from nest_cp.cost.evaluate import evaluate
from nest_cp.harness.runs import Run, build, predict
from nest_cp.profiles.hfconfig import spec_from_description
from nest_cp.profiles.presets import DEVICES, MEGATRON_ADAM

REPORT = Path(__file__).parent.parent / "reports" / "fidelity"
SCRIPT = Path(__file__).parent.parent / "scripts" / "reports" / "fidelity.py"
DEVICE = DEVICES["h100-sxm-uncalibrated"]
MODEL = spec_from_description({
    "name": "gpt-small", "hidden": 2048, "ffn_hidden": 8192, "num_layers": 2, "num_heads": 16,
    "vocab": 32768, "activation": "gelu", "norm": "layernorm", "bias": True, "dropout": False,
    "tied_embeddings": False, "default_seq_len": 2048}, prefix="model")
# TP 8 fills one DGX H100 node, so every TP group lies inside a tier-0 domain (§5 e applies)
RUN = Run(name="tp8", model=MODEL, network="dgx-h100-superpod", devices=16, tp=8, pp=1, dp=2,
          microbatch=1, global_batch=4, seq_len=2048, overlap_param_gather=True)


def _chunk(run: Run):
    instance, plan = build(run, DEVICE, MEGATRON_ADAM)
    (stage,) = evaluate(instance, plan).stages
    (chunk,) = stage.chunks
    return instance, chunk


def test_flag_reaches_training_setup_and_hides_tp_collectives():
    """With the flag the instance sets tp_comm_overlap and the chunk's TP collectives split
    into a hidden and a charged part that add up to what the flag-off run charges in full,
    with at least a t-th of them charged; the prediction is faster."""
    off_instance, off = _chunk(RUN)
    on_instance, on = _chunk(replace(RUN, tp_comm_overlap=True))
    assert not off_instance.training.tp_comm_overlap and on_instance.training.tp_comm_overlap
    assert off.tp_hidden_ticks == 0 and on.tp_hidden_ticks > 0
    assert on.collective_ticks + on.tp_hidden_ticks == off.collective_ticks
    assert on.collective_ticks >= off.collective_ticks / RUN.tp
    assert on.compute_ticks == off.compute_ticks
    faster = predict(replace(RUN, tp_comm_overlap=True), DEVICE, MEGATRON_ADAM)
    assert faster.iteration_s < predict(RUN, DEVICE, MEGATRON_ADAM).iteration_s


def test_fidelity_rows_overlap_tp_exactly_where_their_source_states_it(monkeypatch):
    """inputs.json sets tp_comm_overlap on a row iff its source states --tp-comm-overlap
    (the Megatron-Core rows, not Llama 3's), and scripts/reports/fidelity.py reads it,
    absent = not set."""
    spec = importlib.util.spec_from_file_location("fidelity_generate", SCRIPT)
    generate = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, generate)  # its dataclasses look it up
    spec.loader.exec_module(generate)
    doc, rows = generate.load_rows(REPORT / "inputs.json")
    stated = {row.run.name: "--tp-comm-overlap" in doc["sources"][row.source] for row in rows}
    assert {row.run.name: row.run.tp_comm_overlap for row in rows} == stated
    assert any(stated.values()) and not all(stated.values())
