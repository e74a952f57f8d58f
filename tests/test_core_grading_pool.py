"""routing_grpo.core.grading_pool: the main thread's timer and the worker pool with a hard deadline per item."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from routing_grpo.core import grading_pool
from routing_grpo.core.grading_pool import (
    HARD_DEADLINE_GRACE_S,
    TimedOut,
    WorkerPool,
    available_cpus,
    run_in_pool,
    shutdown_pool,
    signal_timer_usable,
    time_limit,
)


def _square_or_misbehave(x: int) -> int:
    """Pool payload (module level, so that it pickles by reference): hangs on 13, dies on 17."""
    if x == 13:
        time.sleep(600)  # no timer of its own: only the parent's hard deadline can end it
    if x == 17:
        os._exit(3)
    return x * x


@pytest.mark.slow
def test_pool_kills_a_stuck_worker_and_replaces_a_dead_one():
    pool = WorkerPool(2)
    try:
        items = [(i,) for i in range(24)]
        start = time.monotonic()
        results = pool.run(_square_or_misbehave, items, timeout_s=0.1)
        elapsed = time.monotonic() - start
        assert results == [None if i in (13, 17) else i * i for i in range(24)]
        # The hung item was ended by the hard deadline, not by its 600 s sleep.
        assert elapsed < 0.1 + HARD_DEADLINE_GRACE_S + 60
        assert len(pool._workers) == 2 and all(w.process.is_alive() for w in pool._workers)
        # The replaced workers serve the next run.
        assert pool.run(_square_or_misbehave, [(2,), (3,)], timeout_s=0.1) == [4, 9]
    finally:
        pool.close()
    assert all(not w.process.is_alive() for w in pool._workers)


def test_the_timer_interrupts_the_main_thread_and_restores_the_handler():
    previous = signal.getsignal(signal.SIGALRM)
    assert signal_timer_usable()
    start = time.monotonic()
    with pytest.raises(TimedOut), time_limit(0.05):
        while True:  # pure Python: only the alarm ends it
            pass
    assert time.monotonic() - start < 5
    assert signal.getsignal(signal.SIGALRM) is previous
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with time_limit(5):  # finished in time: nothing raised, the timer disarmed
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    # TimedOut is not an Exception, so a broad `except Exception` in the timed code cannot swallow it.
    assert not issubclass(TimedOut, Exception)


def test_off_the_main_thread_the_timer_is_not_usable():
    seen = []
    worker = threading.Thread(target=lambda: seen.append(signal_timer_usable()))
    worker.start()
    worker.join()
    assert seen == [False]


def test_the_shared_pool_runs_in_order_and_is_resized_and_shut_down():
    shutdown_pool()
    assert grading_pool._POOL is None
    assert run_in_pool(2, _square_or_misbehave, [(i,) for i in range(10)], timeout_s=5) == [
        i * i for i in range(10)
    ]
    first = grading_pool._POOL
    assert first is not None and first.size == 2 and all(w.process.is_alive() for w in first._workers)
    assert run_in_pool(None, _square_or_misbehave, [(3,)], timeout_s=5) == [
        9
    ]  # None: the running pool's size
    assert grading_pool._POOL is first
    assert run_in_pool(1, _square_or_misbehave, [(4,)], timeout_s=5) == [16]  # another size: a new pool
    assert grading_pool._POOL is not first and grading_pool._POOL.size == 1
    shutdown_pool()
    assert grading_pool._POOL is None
    assert available_cpus() >= 1
