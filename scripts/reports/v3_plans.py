"""The DP's plan of preset instances on the DGX networks, written to the JSON file given.

Run once with this commit's package and once with the last commit before cost model v3
(884457b) importable as ``nest_cp`` (its nest_cp/ with dp/ and verify/ copied inside, on
PYTHONPATH); ``scripts/reports/v3_plans_table.py`` puts the two side by side
(reports/v3_plans/README.md)."""
import json
import sys
import time

from nest_cp.profiles.presets import build_instance
from nest_cp.solvers.registry import solve

out = []
for network in ("dgx-h100-superpod", "dgx-a100"):
    for model in ("gpt3-175b", "llama3-70b", "llama2-7b", "mixtral-8x7b"):
        for devices in (256, 1024):
            inst = build_instance(model=model, devices=devices, network=network)
            t0 = time.perf_counter()
            r = solve(inst, "dp")
            p = r.plan
            shape = None if p is None else {
                "t": p.config.tp, "e": p.config.ep, "S": p.num_stages, "d": p.num_replicas,
                "z": p.zero, "b": p.microbatch, "v": p.virtual_stages}
            out.append({"network": network, "model": model, "devices": devices,
                        "status": r.status.value, "T": r.objective_ticks,
                        "tick": inst.training.tick_s, "plan": shape,
                        "zeros": list(inst.training.zero_stages),
                        "s": round(time.perf_counter() - t0, 2)})
            print(json.dumps(out[-1]), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
