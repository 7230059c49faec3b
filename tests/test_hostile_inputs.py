"""Hostile inputs and output paths: every case answers with the exit-code contract.

Exit codes (nest_cp/model/exits.py): 0 a plan, 1 no plan, 2 bad input or option (one line
naming the file), 3 internal error.  Output paths: never a directory, a device other than
/dev/null, /dev/full or a terminal, or a symlink to one; a failed write (a full disk) is exit
2 naming the file and leaves an existing file as it was; files are written before anything
is printed, and a reader that stops reading early (`| head -c 1`) changes neither a file nor
the exit code.
"""

import dataclasses
import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from pinning import SteppingClock
from tiers import first_fast

from nest_cp import io
from nest_cp.cli import main
from nest_cp.harness import compare
from nest_cp.model import documents
from nest_cp.model.result import SolveOptions, Space, Status
from nest_cp.solvers.registry import solve

DATA = Path(__file__).parent / "data"
EXPORT = DATA / "export"
INSTANCE = DATA / "graph_parallel_links.json"  # solves in milliseconds
EXPORT_INSTANCE = EXPORT / "interleaved_selective.json"
EXPORT_PLAN = EXPORT / "interleaved_selective.plan.json"
WORKED = DATA / "worked_example.json"
WORKED_PLAN = EXPORT / "worked_example_nest.plan.json"
NEST_CP = Path(sys.executable).parent / "nest-cp"


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_error_line(result, code: int = 2, naming: str | None = None) -> None:
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(lines) == 1, result.stderr
    if naming is not None:
        assert naming in lines[0], lines[0]


# every command with an output path: (arguments before the path, the option)
WRITERS = {
    "solve -o": (["solve", INSTANCE], "-o"),
    "export -o": (["export", WORKED_PLAN, "--instance", WORKED, "--format", "megatron"], "-o"),
    "export --rank-map": (["export", WORKED_PLAN, "--instance", WORKED, "--format",
                           "megatron"], "--rank-map"),
    "export --script": (["export", WORKED_PLAN, "--instance", WORKED, "--format",
                         "torchtitan"], "--script"),
    "export --hostfile": (["export", EXPORT_PLAN, "--instance", EXPORT_INSTANCE, "--format",
                           "deepspeed"], "--hostfile"),
    "show --png": (["show", WORKED_PLAN, "--instance", WORKED], "--png"),
    "instance new -o": (["instance", "new", "--model", "llama2-7b", "--devices", "8",
                         "--network", "dgx-a100"], "-o"),
    "calibrate -o": (["calibrate", DATA / "calibration_example.csv", "--train-shapes",
                      "1024x24", "--accept-weak-fit"], "-o"),
    "table -o": (["table", Path(__file__).parent.parent / "reports" / "results.json", "-f",
                  "md"], "-o"),
}


def _png_name(option: str, name: str) -> str:
    return name + ".png" if option == "--png" and not name.startswith("/dev/") else name


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_directory_is_never_replaced(writer, tmp_path):
    """An output path that is a directory, or a symlink to one, is exit 2 and stays one."""
    args, option = WRITERS[writer]
    folder = tmp_path / ("out.png" if option == "--png" else "out")
    folder.mkdir()
    link = tmp_path / _png_name(option, "link")
    link.symlink_to(folder)
    for path in (folder, link):
        result = _cli(*args, option, path)
        _one_error_line(result)
        assert folder.is_dir() and not any(folder.iterdir())


@pytest.mark.skipif(not Path("/dev/urandom").exists(), reason="needs /dev/urandom")
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_device_node_is_never_written_or_replaced(writer, tmp_path):
    """A character device other than /dev/null, /dev/full or a terminal, named directly or
    through a symlink, is refused with exit 2 naming it, before any work; it stays a device."""
    args, option = WRITERS[writer]
    link = tmp_path / _png_name(option, "rand")
    link.symlink_to("/dev/urandom")
    for path in ("/dev/urandom", link):
        result = _cli(*args, option, path)
        _one_error_line(result, naming=str(path))
        assert "character device" in result.stderr and result.stdout == ""
    assert stat.S_ISCHR(os.stat("/dev/urandom").st_mode) and link.is_symlink()


@pytest.mark.parametrize("writer", ["solve -o", "export -o", "show --png"])
def test_dev_null_is_written_in_place(writer):
    """/dev/null is a valid output (in place, never renamed over): exit 0, still a device."""
    args, option = WRITERS[writer]
    result = _cli(*args, option, "/dev/null")
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("writer", ["solve -o", "export -o", "export --rank-map"])
def test_dev_full_is_an_error_naming_the_file(writer):
    """Writing to /dev/full (a full disk) is exit 2 with one line naming /dev/full."""
    args, option = WRITERS[writer]
    result = _cli(*args, option, "/dev/full")
    _one_error_line(result, naming="/dev/full")
    assert "No space left" in result.stderr


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_failed_write_keeps_the_old_file_and_names_it(writer, tmp_path, monkeypatch):
    """A write failing with ENOSPC (faked at the rename) is exit 2 naming the file; the file
    already there keeps its content and no temporary file is left beside it."""
    args, option = WRITERS[writer]
    target = tmp_path / _png_name(option, "out")
    target.write_text("old\n")

    def full(*_):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(documents.os, "replace", full)
    result = _cli(*args, option, target)
    _one_error_line(result, naming=str(target))
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_a_symlink_to_a_regular_file_keeps_the_link(tmp_path):
    """`-o link` where link points to a file replaces the file's content, not the link."""
    real = tmp_path / "real.json"
    real.write_text("{}\n")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    result = _cli("solve", INSTANCE, "-o", link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and "stages" in json.loads(real.read_text())


def test_two_outputs_of_one_command_must_differ(tmp_path):
    """`export -o x --rank-map x` is exit 2 before anything is written."""
    out = tmp_path / "x.sh"
    result = _cli(*WRITERS["export -o"][0], "-o", out, "--rank-map", out)
    _one_error_line(result, naming=str(out))
    assert not out.exists()


def test_show_png_with_another_extension_is_bad_input(tmp_path):
    """`show --png out.txt` is exit 2 (bad option), not 3, and writes nothing."""
    out = tmp_path / "out.txt"
    result = _cli(*WRITERS["show --png"][0], "--png", out)
    _one_error_line(result, naming="--png")
    assert not out.exists()


def _solve_into_a_pipe(instance: Path, plan: Path, reader: str) -> tuple[int, str, bytes]:
    """Run ``nest-cp solve instance -o plan`` with stdout a real pipe whose reader is
    ``head -c 1`` or nobody (the read end closed before the first write); return the exit
    code, stderr and what the reader read."""
    solver = subprocess.Popen([str(NEST_CP), "solve", str(instance), "-o", str(plan)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    read = b""
    if reader == "head -c 1":
        head = subprocess.Popen(["head", "-c", "1"], stdin=solver.stdout,
                                stdout=subprocess.PIPE)
        solver.stdout.close()  # head holds the only read end
        read = head.communicate(timeout=120)[0]
    else:
        solver.stdout.close()
    stderr = solver.stderr.read().decode()
    solver.stderr.close()
    return solver.wait(timeout=120), stderr, read


@pytest.mark.parametrize("repetition", first_fast(range(3)))
@pytest.mark.parametrize("reader", ["head -c 1", "closed"])
def test_a_reader_that_leaves_early_changes_neither_file_nor_exit_code(reader, repetition,
                                                                       tmp_path):
    """`solve -o plan.json | head -c 1`, or a pipe closed before the first write: the plan
    is written before anything is printed and is complete JSON, stderr stays empty (no
    traceback) and the exit code is the command's own, 0, on every repetition (a closed
    pipe is no error: whether head left before the last write is a race; the slow tier
    repeats each reader three times)."""
    plan = tmp_path / f"plan{repetition}.json"
    code, stderr, read = _solve_into_a_pipe(INSTANCE, plan, reader)
    assert (code, stderr) == (0, ""), stderr
    assert read == (b"b" if reader == "head -c 1" else b"")  # "backend ..."
    assert io.load_plan(plan).num_stages >= 1
    json.loads(plan.read_text())


def test_no_plan_into_a_closed_pipe_is_still_exit_1(tmp_path):
    """An instance where no plan fits, its stdout closed before the first write: exit 1 (no
    plan), not a broken-pipe error, and no plan file."""
    plan = tmp_path / "plan.json"
    code, stderr, _ = _solve_into_a_pipe(DATA / "tight_memory.json", plan, "closed")
    assert (code, stderr) == (1, ""), stderr
    assert not plan.exists()


def _stored_comparison(folder: Path) -> Path:
    """``folder/compare.csv`` holding one manual row, as `nest-cp compare` stores it."""
    folder.mkdir(exist_ok=True)
    path = folder / "compare.csv"
    compare.write_csv([compare.Row(instance="i", model="m", cluster="c-8", num_devices=8,
                                   backend="manual", status="FEASIBLE", objective_ticks=10,
                                   throughput=2.0, ratio=1.0, wall_time_s=0.1)], path)
    return path


@pytest.mark.skipif(not Path("/dev/urandom").exists(), reason="needs /dev/urandom")
@pytest.mark.parametrize("name", compare.OUTPUTS)
@pytest.mark.parametrize("kind", ["directory", "device"])
def test_compare_never_writes_into_a_directory_or_a_device(name, kind, tmp_path):
    """`compare --out DIR` where DIR/NAME is a directory or a symlink to /dev/urandom: exit 2
    naming it before anything is solved or (from a stored CSV elsewhere, which leaves
    DIR/compare.csv alone) written; it stays."""
    out = tmp_path / "out"
    stored = _stored_comparison(tmp_path / "stored")
    before = stored.read_bytes()
    out.mkdir()
    if kind == "directory":
        (out / name).mkdir()
    else:
        (out / name).symlink_to("/dev/urandom")
    runs = [[WORKED, "--backends", "manual"]] + [["--from-csv", stored]] * (
        name != "compare.csv")
    for args in runs:
        result = _cli("compare", *args, "--normalize", "manual", "--out", out)
        _one_error_line(result, naming=str(out / name))
        assert sorted(p.name for p in out.iterdir()) == [name]
    assert (out / name).is_dir() if kind == "directory" else (out / name).is_symlink()
    assert stored.read_bytes() == before


def test_compare_out_that_is_a_file_is_bad_input(tmp_path):
    """`compare --out FILE` is exit 2 naming FILE; the file keeps its content."""
    out = tmp_path / "out"
    out.write_text("old\n")
    result = _cli("compare", "--from-csv", _stored_comparison(tmp_path / "stored"),
                  "--normalize", "manual", "--out", out)
    _one_error_line(result, naming=str(out))
    assert out.read_text() == "old\n"


def test_compare_full_disk_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    """A compare write failing with ENOSPC (faked at the rename) is exit 2 naming the file;
    the stored CSV keeps its content and no temporary file is left beside it."""
    stored = _stored_comparison(tmp_path / "out")
    before = stored.read_bytes()

    def full(*_):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(documents.os, "replace", full)
    result = _cli("compare", "--from-csv", stored, "--normalize", "manual", "--out",
                  stored.parent)
    _one_error_line(result, naming=str(stored))
    assert stored.read_bytes() == before
    assert sorted(p.name for p in stored.parent.iterdir()) == ["compare.csv"]


# ------------------------------------------------------------------ inputs


def _hf(tmp_path, **changes) -> Path:
    config = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000} | changes
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("key", ["num_hidden_layers"])
def test_an_hf_config_with_a_billion_layers_is_refused_before_profiling(key, tmp_path,
                                                                          monkeypatch):
    """10^9 layers is exit 2 naming the key, and the profiler is never called."""
    from nest_cp.profiles import presets

    def never(*_, **__):
        raise AssertionError("profiled a config that should have been refused")

    monkeypatch.setattr(presets, "profile_model", never)
    result = _cli("instance", "new", "--hf-config", _hf(tmp_path, **{key: 10**9}),
                  "--devices", "8", "--network", "dgx-a100", "-o", tmp_path / "i.json")
    _one_error_line(result, naming=key)
    assert not (tmp_path / "i.json").exists()


def test_an_instance_transformer_with_a_billion_layers_is_refused(tmp_path):
    """An instance file's `transformer` with num_layers 10^9 is exit 2 naming the field."""
    description = {"name": "huge", "hidden": 256, "ffn_hidden": 512, "num_layers": 10**9,
                   "num_heads": 4, "vocab": 1000}
    path = tmp_path / "instance.json"
    path.write_text(json.dumps({
        "workload": {"transformer": description},
        "cluster": {"preset": "dgx-a100", "num_devices": 8},
        "training": {"global_batch": 8, "seq_len": 128}}))
    result = _cli("instance", "show", path)
    _one_error_line(result, naming="num_layers")


def test_hostile_sizes_in_an_hf_config_are_bad_input(tmp_path):
    """Absurd hidden, vocabulary or FFN sizes end in exit 2 (a tick-range error naming the
    field), never an internal error or a hang."""
    for changes in ({"hidden_size": 10**18, "num_attention_heads": 1},
                    {"vocab_size": 9 * 10**18}, {"intermediate_size": 9 * 10**18}):
        result = _cli("instance", "new", "--hf-config", _hf(tmp_path, **changes), "--devices",
                      "8", "--network", "dgx-a100", "-o", tmp_path / "i.json")
        _one_error_line(result)


def test_deepspeed_refuses_zero_3_beside_a_pipeline_with_exit_2(tmp_path):
    """A ZeRO-3 plan with two stages exported for DeepSpeed is exit 2 with one line quoting
    the pipeline engine's assertion; megatron and torchtitan export it."""
    plan_path, instance_path = tmp_path / "zero3.json", tmp_path / "instance.json"
    io.save_plan(dataclasses.replace(io.load_plan(EXPORT_PLAN), zero=3), plan_path)
    instance = io.load_instance(EXPORT_INSTANCE)
    io.save_instance(dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, zero_stages=(0, 1, 2, 3))), instance_path)
    result = _cli("export", plan_path, "--instance", instance_path, "--format", "deepspeed")
    _one_error_line(result, naming="ZeRO-2 and ZeRO-3 are incompatible with pipeline")
    for fmt in ("megatron", "torchtitan"):
        assert _cli("export", plan_path, "--instance", instance_path, "--format",
                    fmt).exit_code == 0


# ------------------------------------------------------------------ the DP hint's time limit


@pytest.mark.parametrize("seconds", [0, 3, 12, 40])
def test_the_dp_stopped_at_its_limit_returns_a_valid_bound(seconds, monkeypatch):
    """With STOP_AFTER_S the DP stops after that many (fake) seconds: UNKNOWN without a plan,
    or FEASIBLE with bound <= the full DP's optimum <= its plan's objective, never OPTIMAL
    unless it finished."""
    from nest_cp.dp import planner

    instance = io.load_instance(WORKED)
    optimum = solve(instance, "dp", SolveOptions(space=Space.STRUCTURED)).objective_ticks
    monkeypatch.setattr(planner.time, "perf_counter", SteppingClock())
    result = solve(instance, "dp", SolveOptions(space=Space.STRUCTURED,
                                                extra={planner.STOP_AFTER_S: seconds}))
    if result.status is Status.UNKNOWN:
        assert result.plan is None
    elif result.status is Status.FEASIBLE:
        assert result.bound_ticks <= optimum <= result.objective_ticks
    else:
        assert result.status is Status.OPTIMAL and result.objective_ticks == optimum
    if seconds == 0:
        assert result.status is Status.UNKNOWN


def test_solve_gives_the_dp_hint_the_time_limit(monkeypatch, tmp_path):
    """`solve --backend cpsat --time-limit T` runs the DP hint with STOP_AFTER_S at most T
    (less what loading the instance took)."""
    from nest_cp.cli import solve as solve_module
    from nest_cp.dp.planner import STOP_AFTER_S

    seen = []
    real = solve_module.run_unrefereed

    def spy(instance, backend, options):
        seen.append((backend, options.extra.get(STOP_AFTER_S)))
        return real(instance, backend, options)

    monkeypatch.setattr(solve_module, "run_unrefereed", spy)
    result = _cli("solve", WORKED, "--backend", "cpsat", "--time-limit", "7", "--workers", "1")
    assert result.exit_code == 0, result.output
    assert seen[0][0] == "dp" and 6.5 < seen[0][1] <= 7.0


def test_solve_keeps_time_back_for_the_checks_after_the_search(monkeypatch):
    """--time-limit bounds the whole command: the exact backend gets the limit less the
    hint's time and AFTER_SEARCH_CHECKS times the hint's referee check (made to take 0.25 s
    here), which the check, report and plan file after the search take at 10^6 devices."""
    import time

    from nest_cp.cli import solve as solve_module

    limits = []
    real_run, real_check = solve_module.run_unrefereed, solve_module.check_result

    def run(instance, backend, options):
        limits.append((backend, options.time_limit_s))
        return real_run(instance, backend, options)

    def slow_check(instance, result):
        if result.backend == "dp":
            time.sleep(0.25)
        return real_check(instance, result)

    monkeypatch.setattr(solve_module, "run_unrefereed", run)
    monkeypatch.setattr(solve_module, "check_result", slow_check)
    result = _cli("solve", WORKED, "--backend", "cpsat", "--time-limit", "7", "--workers", "1")
    assert result.exit_code == 0, result.output
    backend, limit = limits[1]
    kept_back = solve_module.AFTER_SEARCH_CHECKS * 0.25
    assert backend == "cpsat" and 7 - kept_back - 0.5 < limit <= 7 - kept_back


def _overwrites(tmp_path: Path) -> dict[str, tuple[list, Path]]:
    """Every command with an output option, given one of its own inputs (a copy in
    ``tmp_path``) as that output: (arguments, the input named twice)."""
    def copy(source: Path, name: str | None = None) -> Path:
        target = tmp_path / (name or source.name)
        target.write_bytes(source.read_bytes())
        return target

    instance, plan = copy(WORKED), copy(WORKED_PLAN)
    csv, hf = copy(DATA / "calibration_example.csv"), copy(DATA / "hf_tiny_llama.json")
    results = copy(Path(__file__).parent.parent / "reports" / "results.json")
    (tmp_path / "out").mkdir()
    in_out = copy(WORKED, "out/sweep.json")
    compared = copy(WORKED, "out/compare.csv")
    png = tmp_path / "instance.png"
    png.symlink_to(instance)  # another name for the same file
    export = ["export", plan, "--instance", instance, "--format", "megatron"]
    return {
        "solve -o": (["solve", instance, "-o", instance], instance),
        "export -o plan": ([*export, "-o", plan], plan),
        "export -o instance": ([*export, "-o", instance], instance),
        "export --rank-map": ([*export, "--rank-map", instance], instance),
        "show --png": (["show", plan, "--instance", instance, "--png", png], instance),
        "calibrate -o": (["calibrate", csv, "--train-shapes", "1024x24", "--accept-weak-fit",
                          "-o", csv], csv),
        "instance new -o": (["instance", "new", "--hf-config", hf, "--devices", "8",
                             "--network", "dgx-a100", "-o", hf], hf),
        "sweep --out": (["sweep", in_out, "--vary", "devices=4,8", "--out", tmp_path / "out"],
                        in_out),
        "compare --out": (["compare", compared, "--backends", "manual", "--out",
                           tmp_path / "out"], compared),
        "table -o": (["table", results, "-o", results], results),
    }


@pytest.mark.parametrize("case", ["solve -o", "export -o plan", "export -o instance",
                                  "export --rank-map", "show --png", "calibrate -o",
                                  "instance new -o", "sweep --out", "compare --out", "table -o"])
def test_an_output_that_is_one_of_the_inputs_is_refused(case, tmp_path):
    """`solve I.json -o I.json` and the like: exit 2, one line naming the file, and the input
    is left as it was (every command with an output option)."""
    args, reused = _overwrites(tmp_path)[case]
    before = reused.read_bytes()
    result = _cli(*args)
    _one_error_line(result, naming="would be overwritten")
    assert reused.read_bytes() == before


def test_a_csv_field_over_the_csv_modules_limit_names_its_row_and_column(tmp_path):
    """calibrate: a 200,000-character field (the csv module stops at 131,072) is bad input,
    exit 2 naming the file, the row and the column, not an internal error."""
    lines = (DATA / "calibration_example.csv").read_text(encoding="utf-8-sig").splitlines()
    values = lines[2].split(",")
    values[6] += "9" * 200_000  # sequence length
    path = tmp_path / "m.csv"
    path.write_text("\n".join([lines[0], lines[1], ",".join(values)]) + "\n")
    result = _cli("calibrate", path, "--train-shapes", "1024x24")
    _one_error_line(result, naming=f"{path}: row 3.sequence length: expected a field of at most")


def test_a_model_dimension_out_of_range_is_named_before_profiling(tmp_path, monkeypatch):
    """hidden_size 10^12 in an HF config: exit 2 naming hidden_size (not training.tick_s),
    and the profiler is never called."""
    from nest_cp.profiles import presets

    def never(*_, **__):
        raise AssertionError("profiled a config that should have been refused")

    monkeypatch.setattr(presets, "profile_model", never)
    config = _hf(tmp_path, hidden_size=10**12)
    result = _cli("instance", "new", "--hf-config", config, "--devices", "8", "--network",
                  "dgx-a100", "-o", tmp_path / "i.json")
    _one_error_line(result, naming=f"{config}: hidden_size: expected an integer <=")


@pytest.mark.parametrize("fwd_s, repeat, field", [
    (1e9, 2, "workload.layers[0]: expected layer times"),  # one layer's times
    (10.0, 1000, "workload.layers: expected a chain"),     # every layer fits, 1,000 do not
])
def test_the_tick_range_error_names_the_field_out_of_range(fwd_s, repeat, field, tmp_path):
    """An instance whose iteration could exceed 2**53 ticks blames the field at fault: a
    layer computing for 10^18 ticks, or 1,000 layers of 10 s each (each within range alone),
    not training.tick_s."""
    data = json.loads((DATA / "broken_tick_overflow.json").read_text())
    layer = data["workload"]["layers"][0]
    layer["repeat"] = repeat
    layer["profiles"][0].update(fwd_s=fwd_s, bwd_s=fwd_s)
    path = tmp_path / "i.json"
    path.write_text(json.dumps(data))
    _one_error_line(_cli("instance", "show", path), naming=f"{path}: {field}")
