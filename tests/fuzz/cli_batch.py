"""Many CLI fuzz cases in one process: `python -m tests.fuzz.cli_batch` reads one JSON argv per line on stdin
(the arguments after `python -m engine`), runs each through `engine.cli.main` as `python -m engine` would, and
writes one JSON line per case: its exit code, stdout and stderr. Output is encoded as the real process encodes it
(UTF-8: strict on stdout, backslash-replaced on stderr): text a real process could not write is a
failure here too. A case still running after
--limit-s seconds is interrupted and reported as a hang.

It spares the fuzz test an interpreter start per case (about 0.7 s of CPU each, 750 cases); tests/fuzz/
test_fuzz_cli.py still runs a share of the cases as real `python -m engine` processes."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import signal
import sys
import traceback


class Hang(BaseException):
    """Raised by the alarm inside a case that ran past the limit (a BaseException: no `except Exception` eats it)."""


def _alarm(signum, frame):  # noqa: ANN001 - signal's own signature
    raise Hang()


def run(argv: list[str], limit_s: float) -> dict:
    from engine.cli import main

    out, err = io.StringIO(), io.StringIO()
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
    except Hang:
        return {"hang": True}
    except BaseException:  # what the real process would print as a traceback, exit 1
        err.write(traceback.format_exc())
        code = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    result = {"code": code, "stderr": err.getvalue().encode("utf-8", "backslashreplace").decode("utf-8")}
    try:
        result["stdout"] = out.getvalue()
        result["stdout"].encode("utf-8")  # PYTHONIOENCODING=utf-8: stdout is strict (stderr backslash-replaces)
    except UnicodeEncodeError as e:
        result.update(code=1, stdout="", stderr=f"{result['stderr']}Traceback: a real process could not write its "
                      f"stdout: {e}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit-s", type=float, required=True)
    limit_s = ap.parse_args().limit_s
    signal.signal(signal.SIGALRM, _alarm)
    for line in sys.stdin:
        result = run(json.loads(line), limit_s)
        sys.stdout.write(json.dumps(result, ensure_ascii=True) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
