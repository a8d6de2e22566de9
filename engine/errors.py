"""Errors a user can act on: each names what is wrong (a field, a table) and what would help."""

from __future__ import annotations


def one_line(text: str) -> str:
    """Text with its control characters escaped, so a message that quotes user input stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class EngineError(Exception):
    """Base of the errors the CLI turns into one line and exit code 2."""


class ConfigError(EngineError):
    """A config or plan file that is malformed; `field` is a path such as tables[2].embedding_dim."""

    def __init__(self, field: str, message: str):
        self.field = one_line(field)
        self.message = one_line(message)
        super().__init__(f"{self.field}: {self.message}" if field else self.message)


class PlanningError(EngineError):
    """No plan satisfies the constraints and memory; carries the tables and the fixes to try."""

    def __init__(self, message: str, tables: tuple[str, ...] = (), fixes: tuple[str, ...] = ()):
        self.tables = tables
        self.fixes = fixes
        self.message = message
        text = message
        if fixes:
            text += " What would help: " + "; ".join(fixes) + "."
        super().__init__(text)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"
