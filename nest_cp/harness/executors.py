"""Where the harness runs its tasks: a local process pool, or Ray tasks on a cluster.

The sweeps (``verify``, ``compare``, ``soak``) hand an :class:`Executor` a
picklable module-level function and a list of tasks and read back one
:class:`Done` per task, in completion order, so they can report progress as
work finishes.  A task that raises is a :class:`Done` with ``error`` set, never
a crash of the sweep: the harness decides what an error means (bad input stops
the run, a crashed solver becomes a failed row).  The two executors run the same
function on the same tasks, so their results are the same; only where the work
happens differs.

- ``local``: today's behaviour: ``jobs`` worker processes
  (:class:`concurrent.futures.ProcessPoolExecutor`), or the calling process
  when ``jobs`` is 1 or there is one task.
- ``ray``: each task is a Ray task (one CPU) on the cluster ``address`` names
  (``ray.init(address=...)``: ``auto``, ``ray://host:port``, ...), or on a
  local Ray instance of ``jobs`` CPUs when no address is given.  Workers run
  in the driver's working directory, so relative paths (instances, the verify
  cache) mean the same files; on a multi-machine cluster that directory must be
  on a shared filesystem at the same path.  Ray is the optional extra
  ``nest-cp[ray]``; without it, choosing ``ray`` is bad input (exit 2).

How the soak (or any new sweep) plugs in: build tasks, pick an executor with
:func:`make_executor` from ``--executor``/``--address``/``--jobs``, and iterate
``executor.run(function, tasks)`` inside ``with executor:``; :func:`run_ordered`
does the common case (results in task order, a callback per finished task).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from enum import Enum
from typing import Any

import click

from nest_cp.model.errors import BackendOptionError


class ExecutorKind(str, Enum):
    LOCAL = "local"
    RAY = "ray"


@dataclass(frozen=True, slots=True)
class Done:
    """Task ``index`` finished: its return ``value``, or the ``error`` it raised."""

    index: int
    value: Any = None
    error: BaseException | None = None


def call_task(function: Callable[[Any], Any], index: int, task: Any) -> Done:
    """Run one task and wrap its outcome; an exception becomes ``Done.error``."""
    try:
        return Done(index, value=function(task))
    except Exception as error:  # noqa: BLE001 - the harness decides what an error means
        return Done(index, error=error)


class Executor:
    """Runs ``function`` over tasks; use as a context manager so resources are released."""

    name = "executor"

    def run(self, function: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[Done]:
        raise NotImplementedError

    def close(self) -> None:
        """Release workers or the cluster connection (idempotent)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class LocalExecutor(Executor):
    """``jobs`` local worker processes; inline when ``jobs`` is 1 or there is one task."""

    name = ExecutorKind.LOCAL.value

    def __init__(self, jobs: int = 1):
        if jobs < 1:
            raise BackendOptionError(f"expected jobs >= 1, got {jobs}")
        self.jobs = jobs

    def run(self, function, tasks) -> Iterator[Done]:
        if self.jobs <= 1 or len(tasks) <= 1:
            for index, task in enumerate(tasks):
                yield call_task(function, index, task)
            return
        with ProcessPoolExecutor(max_workers=min(self.jobs, len(tasks))) as pool:
            futures = {pool.submit(call_task, function, index, task): index
                       for index, task in enumerate(tasks)}
            for future in as_completed(futures):
                try:
                    yield future.result()
                except Exception as error:  # noqa: BLE001 - e.g. a killed worker process
                    yield Done(futures[future], error=error)


class RayExecutor(Executor):
    """Each task a one-CPU Ray task; a local Ray instance of ``jobs`` CPUs without address."""

    name = ExecutorKind.RAY.value

    def __init__(self, address: str | None = None, jobs: int = 1):
        try:
            import ray
        except ImportError:
            raise BackendOptionError("--executor ray needs Ray: pip install 'nest-cp[ray]'") \
                from None
        if jobs < 1:
            raise BackendOptionError(f"expected jobs >= 1, got {jobs}")
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            options = {"include_dashboard": False, "log_to_driver": False}
            if address is None:
                options["num_cpus"] = jobs
            try:
                ray.init(address=address, **options)
            except (ConnectionError, ValueError, RuntimeError) as error:
                raise BackendOptionError(f"--address {address}: cannot connect to a Ray "
                                         f"cluster ({error})") from None
        self._remote = ray.remote(num_cpus=1)(_ray_task)

    def run(self, function, tasks) -> Iterator[Done]:
        ray = self._ray
        cwd = os.getcwd()
        pending = {self._remote.remote(function, index, task, cwd): index
                   for index, task in enumerate(tasks)}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(ready[0])
            try:
                yield ray.get(ready[0])
            except Exception as error:  # noqa: BLE001 - a worker that died under the task
                yield Done(index, error=error)

    def close(self) -> None:
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
        self._started = False


def _ray_task(function, index: int, task, cwd: str) -> Done:
    """A Ray task: the driver's working directory, then the task (module doc)."""
    if os.path.isdir(cwd):
        os.chdir(cwd)
    else:
        return Done(index, error=FileNotFoundError(
            f"Ray worker has no {cwd} (the driver's working directory); a multi-machine "
            f"cluster needs it on a shared filesystem"))
    return call_task(function, index, task)


def make_executor(kind: str | ExecutorKind, jobs: int = 1,
                  address: str | None = None) -> Executor:
    """The executor named by ``--executor`` (``--address`` only goes with ``ray``)."""
    kind = ExecutorKind(kind)
    if kind is ExecutorKind.LOCAL:
        if address is not None:
            raise BackendOptionError("--address needs --executor ray")
        return LocalExecutor(jobs)
    return RayExecutor(address, jobs)


def run_ordered(executor: Executor, function: Callable[[Any], Any], tasks: Sequence[Any],
                on_done: Callable[[Done], Any] | None = None) -> list[Done]:
    """Every task's :class:`Done` in task order; ``on_done`` sees each as it finishes."""
    results: dict[int, Done] = {}
    for done in executor.run(function, tasks):
        results[done.index] = done
        if on_done is not None:
            on_done(done)
    return [results[index] for index in range(len(tasks))]


def executor_options(command: Callable) -> Callable:
    """The ``--executor local|ray`` and ``--address`` options of every sweep command (verify,
    compare, soak), passed as ``executor_kind`` and ``address``."""
    command = click.option(
        "--address", default=None,
        help="Ray cluster address for --executor ray (default: a local Ray instance of "
             "--jobs CPUs).")(command)
    return click.option(
        "--executor", "executor_kind", type=click.Choice([k.value for k in ExecutorKind]),
        default=ExecutorKind.LOCAL.value, show_default=True,
        help="Run solves in local processes or as Ray tasks (pip install 'nest-cp[ray]')."
    )(command)
