"""One-line argparse errors for every `python -m engine` command: `error: CMD: message`, exit code 2."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn, Optional

EXIT_USAGE = 2


def one_line_errors(p: argparse.ArgumentParser, command: str,
                    check_extras: Optional[Callable[[list[str]], Optional[str]]] = None) -> None:
    """argparse prints usage + message; the engine's rule is one line naming the flag, and exit code 2.
    `command` "" is `python -m engine` itself. `check_extras` may turn unknown arguments into a more helpful
    message."""
    where, see = (f"{command}: ", f"python -m engine {command} --help") if command else ("", "python -m engine --help")

    def error(message: str) -> NoReturn:
        print(f"error: {where}{message} (see {see})", file=sys.stderr)
        sys.exit(EXIT_USAGE)

    def parse_known_args(args=None, namespace=None):  # noqa: ANN001 - argparse's own signature
        ns, extras = type(p).parse_known_args(p, args, namespace)
        if extras:
            error((check_extras and check_extras(extras)) or f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras

    p.error = error  # type: ignore[method-assign]
    p.parse_known_args = parse_known_args  # type: ignore[method-assign]
