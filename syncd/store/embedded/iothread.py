"""One thread that runs the store's blocking calls, in order, for the event loop.

Why not ``loop.run_in_executor`` with a one-thread ``ThreadPoolExecutor``: each
call there goes through a ``concurrent.futures.Future`` (a condition variable,
its own callbacks) chained to an asyncio future, a dozen Python frames run in
the worker thread. Every bytecode the worker runs needs the GIL, which the busy
event loop holds: under load the worker waits for the interpreter's switch
interval at each step, and every group commit pays it. Here the worker runs
the call and one ``call_soon_threadsafe``; the future is the loop's own.

Calls run strictly in submission order on one thread, so a ``LogWriter`` used
only through one ``IoThread`` is never touched by two threads at once.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple["asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # the awaiting task may have been cancelled
        future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


class IoThread:
    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._stopped = False
        # A daemon: a process that exits without closing its store must not
        # hang on this thread; close() joins it, so nothing queued is lost then.
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def run(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        """Queue ``fn(*args)``; the future gets its result or exception."""
        if self._stopped:
            raise RuntimeError("the I/O thread is shut down")
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        """Run what is queued, then stop the thread and wait for it."""
        if not self._stopped:
            self._stopped = True
            self._jobs.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _work(self) -> None:
        get = self._jobs.get
        while True:
            job = get()
            if job is None:
                return
            future, fn, args = job
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the awaiting task, as an executor does
                self._hand_back(future, _fail, exc)
            else:
                self._hand_back(future, _settle, result)
                # Not kept until the next job: a large result (a revert's
                # checkpoint, a page of history) would outlive its reader.
                del result
            del job, future, fn, args

    @staticmethod
    def _hand_back(
        future: asyncio.Future[Any], how: Callable[[asyncio.Future[Any], Any], None], value: Any
    ) -> None:
        try:
            future.get_loop().call_soon_threadsafe(how, future, value)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more
