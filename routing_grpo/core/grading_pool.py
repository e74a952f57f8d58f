"""Deadlines for grading work (:mod:`routing_grpo.core.grading`): a ``SIGALRM`` timer and a worker pool.

On the main thread :func:`time_limit` interrupts slow work; off it, the work goes to the pool of
:func:`run_in_pool` (``forkserver`` workers, safe beside torch's threads), whose workers run it under the same
timer. The parent keeps a hard deadline per item (``timeout_s + HARD_DEADLINE_GRACE_S``): a worker stuck in C
code, or one that died, is killed and replaced, and its item's result is None.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.connection import wait as wait_for_ready
from typing import Any

HARD_DEADLINE_GRACE_S = 2.0
WORKER_START_TIMEOUT_S = 120.0


class TimedOut(BaseException):
    """Raised by the alarm; a BaseException so sympy's broad `except Exception` blocks cannot swallow it."""


def signal_timer_usable() -> bool:
    """Whether :func:`time_limit` can run here (a ``setitimer`` platform, on the main thread)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`TimedOut` in the main thread after `seconds` (SIGALRM interval timer, sub-second
    resolution); the timer and the previous handler are restored on the way out."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimedOut

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            signal.signal(signal.SIGALRM, previous)


def _worker_main(conn: Any) -> None:
    """Worker loop: receive (func, items), send back one result per item as soon as it is done."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn.send("ready")
    while True:
        try:
            func, items = conn.recv()
        except EOFError:  # the parent is gone
            return
        for args in items:
            conn.send(func(*args))


class _Worker:
    def __init__(self, ctx: Any) -> None:
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child_conn,), daemon=True)
        self.process.start()
        child_conn.close()

    def wait_ready(self) -> None:
        try:
            ready = self.conn.poll(WORKER_START_TIMEOUT_S) and self.conn.recv() == "ready"
        except (EOFError, OSError):  # the worker died while starting
            ready = False
        if not ready:
            raise RuntimeError(
                "a grading worker process did not start (a script that grades with a pool must run its "
                "work under `if __name__ == '__main__':`, as the workers re-import the main module)"
            )

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


class WorkerPool:
    """``size`` processes with a deadline per item; unlike concurrent.futures it can kill one stuck worker.
    The ``forkserver`` imports the ``preload`` modules once: a replacement worker starts in milliseconds."""

    def __init__(self, size: int, preload: Sequence[str] = ()) -> None:
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        self._ctx = mp.get_context(method)
        if method == "forkserver" and preload:
            self._ctx.set_forkserver_preload(list(preload))
        self.size, self.pid = size, os.getpid()
        self._workers = [_Worker(self._ctx) for _ in range(size)]
        try:
            for worker in self._workers:
                worker.wait_ready()
        except RuntimeError:
            self.close()
            raise

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        fresh = _Worker(self._ctx)
        self._workers[self._workers.index(worker)] = fresh
        fresh.wait_ready()
        return fresh

    def run(self, func: Callable[..., Any], items: list[tuple[Any, ...]], timeout_s: float) -> list[Any]:
        """``func(*item)`` for each item, in order; None where an item passed its deadline or killed its worker."""
        results: list[Any] = [None] * len(items)
        # Chunks amortise the round trips; several per worker keep the load balanced.
        chunk = max(1, min(16, len(items) // (4 * self.size)))
        todo = deque(deque(range(i, min(i + chunk, len(items)))) for i in range(0, len(items), chunk))
        idle = list(self._workers)
        busy: dict[Any, tuple[_Worker, deque[int], float]] = {}  # conn -> (worker, its items left, deadline)
        per_item_s = timeout_s + HARD_DEADLINE_GRACE_S
        while todo or busy:
            while idle and todo:
                worker, pending = idle.pop(), todo.popleft()
                worker.conn.send((func, [items[i] for i in pending]))
                busy[worker.conn] = (worker, pending, time.monotonic() + per_item_s)
            next_deadline = min(deadline for _, _, deadline in busy.values())
            ready = set(wait_for_ready(list(busy), max(0.0, next_deadline - time.monotonic())))
            now = time.monotonic()
            for conn, (worker, pending, deadline) in list(busy.items()):
                if conn in ready:  # a result, or EOF if the worker died
                    try:
                        results[pending[0]] = conn.recv()
                        ok = True
                    except (EOFError, OSError):
                        ok = False
                elif deadline <= now:  # stuck where its own timer cannot reach
                    ok = False
                else:
                    continue
                del busy[conn]
                pending.popleft()  # done, or left as None
                if not ok:
                    worker = self._replace(worker)
                if ok and pending:
                    busy[conn] = (worker, pending, time.monotonic() + per_item_s)
                    continue
                if pending:
                    todo.appendleft(pending)
                idle.append(worker)
        return results

    def close(self) -> None:
        for worker in self._workers:
            worker.kill()


_POOL: WorkerPool | None = None
_POOL_LOCK = threading.Lock()


def available_cpus() -> int:
    """The CPUs this process may use (its affinity where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_in_pool(
    size: int | None,
    func: Callable[..., Any],
    items: list[tuple[Any, ...]],
    timeout_s: float,
    preload: Sequence[str] = (),
) -> list[Any]:
    """``func(*item)`` for each item, in order, on the shared pool of ``size`` workers (default: the running
    pool's size, else :func:`available_cpus`); None where an item passed its deadline or killed its worker."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None and _POOL.pid != os.getpid():
            _POOL = None  # inherited through fork: those workers belong to the parent
        wanted = max(1, size or (_POOL.size if _POOL else available_cpus()))
        if _POOL is not None and _POOL.size != wanted:
            _POOL.close()
            _POOL = None
        if _POOL is None:
            _POOL = WorkerPool(wanted, preload)
        try:
            return _POOL.run(func, items, timeout_s)
        except BaseException:
            # Interrupted mid-run (Ctrl-C, a worker that cannot restart): the workers may still send results
            # for this run, which the next run would misread, so the pool goes.
            _POOL.close()
            _POOL = None
            raise


def shutdown_pool() -> None:
    """Stop the shared worker pool; the next call that needs one starts a new one."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None and _POOL.pid == os.getpid():
            _POOL.close()
        _POOL = None


atexit.register(shutdown_pool)
