"""Memoisation bounded by memory, not only by count: a 100,000-request run holds about 13 MB of
arrays, a 2,000-request one under 1 MB, so a cache of N entries could hold anything from a few MB
to gigabytes on a shared server. Entries are dropped least recently used first when either bound
is passed; values are shared, never copied (callers must not modify them)."""
from __future__ import annotations

import dataclasses
import functools
import threading
from collections import OrderedDict
from typing import Callable

import numpy as np


def nbytes(obj, _seen: set | None = None) -> int:
    """Bytes of the numpy arrays (and pandas frames) reachable through dataclasses, dicts, lists
    and tuples: what dominates a simulation's result."""
    seen = _seen if _seen is not None else set()
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if hasattr(obj, "memory_usage") and hasattr(obj, "columns"):  # a pandas DataFrame
        return int(obj.memory_usage(index=True).sum())
    if isinstance(obj, dict):
        return sum(nbytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(v, seen) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(nbytes(getattr(obj, f.name), seen) for f in dataclasses.fields(obj))
    return 0


class Memo:
    def __init__(self, max_bytes: int, max_entries: int):
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self._items: OrderedDict = OrderedDict()  # key -> (value, bytes)
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key):
        """(True, value) on a hit, (False, None) on a miss."""
        with self._lock:
            if key not in self._items:
                return False, None
            self._items.move_to_end(key)
            return True, self._items[key][0]

    def put(self, key, value) -> None:
        size = nbytes(value)
        with self._lock:
            if key in self._items:
                self._bytes -= self._items.pop(key)[1]
            if size > self.max_bytes:
                return  # larger than the whole budget: not kept
            self._items[key] = (value, size)
            self._bytes += size
            while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
                self._bytes -= self._items.popitem(last=False)[1][1]

    def stats(self) -> dict:
        with self._lock:
            return dict(entries=len(self._items), bytes=self._bytes)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


def bounded(max_bytes: int, max_entries: int) -> Callable:
    """Like functools.lru_cache (hashable arguments), bounded by the bytes of its results too."""
    def wrap(fn):
        memo = Memo(max_bytes, max_entries)

        @functools.wraps(fn)
        def call(*args):
            hit, value = memo.get(args)
            if hit:
                return value
            value = fn(*args)
            memo.put(args, value)
            return value
        call.memo = memo
        return call
    return wrap
