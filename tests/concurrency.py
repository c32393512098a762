"""Run a function on several arguments at once, one thread each (generations or requests
that must overlap); results in argument order. A thread that has not finished within
`timeout` seconds fails the test."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def concurrently(fn: Callable[[Any], T], args: Sequence[Any], timeout: float = 120.0) -> list[T]:
    out: dict[int, T] = {}
    errors: dict[int, BaseException] = {}

    def run(i: int, a: Any) -> None:
        try:
            out[i] = fn(a)
        except BaseException as exc:  # re-raised in the test's thread below
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i, a), daemon=True) for i, a in enumerate(args)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    stuck = [i for i, t in enumerate(threads) if t.is_alive()]
    assert not stuck, f"still running after {timeout} s: arguments {stuck}"
    if errors:
        raise errors[min(errors)]
    return [out[i] for i in range(len(args))]
