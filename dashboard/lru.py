"""A small thread-safe LRU map (every session's script thread, and the planning pool's threads, use the app's
caches at once). Pure: no Streamlit."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Hashable


class Lru:
    """At most `entries` items; the least recently used goes first. Values are shared, never copied."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key not in self._items:
                return default
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.entries:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
