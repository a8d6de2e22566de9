"""Serve a team: N app servers (`streamlit run dashboard/app.py`) on local ports and nginx in front of them on
one port, with sticky sessions, all on one PostgreSQL database (DATABASE_URL). `bash scripts/team.sh` runs this;
Ctrl-C or SIGTERM stops every process it started. docs/deploy.md says how to run it for a team.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from engine import atomicfile

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "deploy" / "nginx.conf.template"
DEFAULT_PORT = 8501
DEFAULT_DIR = ROOT / "data" / "team"
MAX_SERVERS = 64
MAX_UPLOAD_MB = 200  # Streamlit's default server.maxUploadSize; nginx's client_max_body_size is set to the same
START_TIMEOUT_S = 120  # safety stop on one server's start (a loaded machine imports torch slowly)
STOP_TIMEOUT_S = 20
POLL_S = 0.2
# Checked paths only go into nginx's config: no space, quote, semicolon, brace, `$` or newline.
SAFE_PATH = re.compile(r"[A-Za-z0-9._/+-]+")
TEMP_DIRS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
COOKIE_SECRET_ENV = "STREAMLIT_SERVER_COOKIE_SECRET"


class TeamError(Exception):
    """Something the user can fix; the message names it and the cure."""


@dataclass(frozen=True)
class Team:
    """What runs: the proxy's address and port, the app servers' ports, nginx's prefix dir, the upload limit."""

    listen: str
    port: int
    server_ports: tuple[int, ...]
    prefix: Path
    max_upload_mb: int = MAX_UPLOAD_MB

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.listen in ("0.0.0.0", "::") else self.listen
        return f"http://{host}:{self.port}"


def check_database_url(url: str) -> None:
    """A team shares one PostgreSQL database; raises TeamError for anything else (never echoing the password)."""
    from db.errors import StoreError
    from db.session import parse_url

    if not url.strip():
        raise TeamError("DATABASE_URL is not set: a team's servers share one PostgreSQL database; set "
                        "DATABASE_URL=postgresql+psycopg://USER:PASSWORD@HOST/DATABASE")
    try:
        backend = parse_url(url.strip()).get_backend_name()
    except StoreError as e:
        raise TeamError(str(e)) from None
    if backend == "sqlite":
        raise TeamError("DATABASE_URL names SQLite: a team's servers share one PostgreSQL database (a SQLite file "
                        "takes one writer at a time and is local to one machine); set "
                        "DATABASE_URL=postgresql+psycopg://USER:PASSWORD@HOST/DATABASE")
    if backend != "postgresql":
        raise TeamError(f"DATABASE_URL names {backend}: a team's servers share one PostgreSQL database")


def _port(text: str, what: str) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= 65535:
        raise TeamError(f"{what}: a port is a number from 1 to 65535, got {text!r}")
    return int(text)


def team_from_args(args: argparse.Namespace) -> Team:
    """Checks every option; raises TeamError naming the first bad one."""
    if not 1 <= args.servers <= MAX_SERVERS:
        raise TeamError(f"--servers: from 1 to {MAX_SERVERS}, got {args.servers}")
    port = _port(str(args.port), "--port")
    if args.server_ports:
        ports = tuple(_port(p, "--server-ports") for p in args.server_ports.split(","))
        if len(ports) != args.servers:
            raise TeamError(f"--server-ports: {args.servers} ports for --servers {args.servers}, got {len(ports)}")
    else:
        ports = tuple(port + 1 + i for i in range(args.servers))
        if ports[-1] > 65535:
            raise TeamError(f"--port: the servers take the {args.servers} ports after it; give a lower --port")
    if len(set(ports) | {port}) != len(ports) + 1:
        raise TeamError("--server-ports: every server needs its own port, other than --port")
    try:
        listen = str(ipaddress.ip_address(args.listen))
    except ValueError:
        raise TeamError(f"--listen: an IP address such as 0.0.0.0 or 127.0.0.1, got {args.listen!r}") from None
    prefix = Path(args.dir).absolute()
    if not SAFE_PATH.fullmatch(str(prefix)):
        raise TeamError("--dir: nginx's directory may hold only letters, digits and . _ / + - in its path "
                        "(it is written into nginx's config)")
    if not 1 <= args.max_upload_mb <= 100_000:
        raise TeamError(f"--max-upload-mb: from 1 to 100000, got {args.max_upload_mb}")
    return Team(listen if ":" not in listen else f"[{listen}]", port, ports, prefix, args.max_upload_mb)


def nginx_user() -> tuple[str, str] | None:
    """As root, nginx's workers run as nobody (they need no file of ours: nothing is buffered to disk); as
    another user nginx cannot switch users, so the config names none."""
    if os.geteuid() != 0:
        return None
    import grp

    nobody = pwd.getpwnam("nobody")
    return nobody.pw_name, grp.getgrgid(nobody.pw_gid).gr_name


def render(team: Team, user: tuple[str, str] | None = None) -> str:
    """nginx.conf from the template: numbers, the checked prefix path and the user's fixed name only."""
    servers = "\n".join(f"        server 127.0.0.1:{int(p)} max_fails=1 fail_timeout=5s;" for p in team.server_ports)
    slots = {"@@USER_LINE@@": f"user {user[0]} {user[1]};" if user else "# not root: the workers run as this user",
             "@@PREFIX@@": str(team.prefix), "@@SERVERS@@": servers, "@@LISTEN@@": team.listen,
             "@@PORT@@": str(int(team.port)), "@@MAX_UPLOAD_MB@@": str(int(team.max_upload_mb))}
    text = TEMPLATE.read_text(encoding="utf-8")
    for slot, value in slots.items():
        text = text.replace(slot, value)
    left = re.findall(r"@@[A-Z_]+@@", text)
    if left:
        raise RuntimeError(f"{TEMPLATE} has slots nothing fills: {sorted(set(left))}")
    return text


def find_nginx() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
                                           if os.access(p, os.X_OK)), None)
    if found is None:
        raise TeamError("nginx is not installed: apt-get install nginx (Debian's package; its own service need "
                        "not run: this starts nginx itself)")
    return found


def write_config(team: Team) -> Path:
    for sub in ("logs", "tmp"):
        (team.prefix / sub).mkdir(parents=True, exist_ok=True)
    conf = team.prefix / "nginx.conf"
    atomicfile.write_text(conf, render(team, nginx_user()))
    return conf


def nginx_argv(nginx: str, team: Team, *more: str) -> list[str]:
    conf = team.prefix / "nginx.conf"
    return [nginx, "-p", f"{team.prefix}/", "-c", str(conf), "-e", str(team.prefix / "logs" / "error.log"), *more]


def server_argv(port: int, max_upload_mb: int) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", "dashboard/app.py", "--server.headless", "true",
            "--server.address", "127.0.0.1", "--server.port", str(port), "--server.fileWatcherType", "none",
            "--browser.gatherUsageStats", "false", "--server.maxUploadSize", str(max_upload_mb)]


def server_env() -> dict[str, str]:
    """This environment (DATABASE_URL, PLANNER_PUBLIC_URL, ...) and one cookie secret for every server, so a
    browser moved to another server (its own went down) keeps a valid XSRF cookie for uploads."""
    env = dict(os.environ)
    env.setdefault(COOKIE_SECRET_ENV, secrets.token_hex(32))
    return env


class Children:
    """The processes this started, stopped together: nginx first (no new requests), then the servers."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []

    def start(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        with open(log_path, "ab") as log:
            # Its own process group: a terminal's Ctrl-C reaches this supervisor only, which stops them in order.
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, proc, log_path))

    def exited(self) -> tuple[str, int, Path] | None:
        return next(((n, p.returncode, log) for n, p, log in self.procs if p.poll() is not None), None)

    def stop(self) -> None:
        for name, proc, _ in reversed(self.procs):  # nginx was started last
            if proc.poll() is None:
                proc.send_signal(signal.SIGQUIT if name == "nginx" else signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for _, proc, _ in self.procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _scrubbed(text: str) -> str:
    """A child's output with DATABASE_URL's password hidden (the supervisor prints it)."""
    from db.urls import scrub

    return scrub(text, os.environ.get("DATABASE_URL", ""))


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return _scrubbed(path.read_text(encoding="utf-8", errors="replace")[-chars:])
    except OSError:
        return ""


def wait_healthy(url: str, children: Children, timeout_s: float = START_TIMEOUT_S) -> None:
    """Wait until `url` answers "ok"; raises TeamError when a child exits first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        gone = children.exited()
        if gone:
            name, rc, log = gone
            raise TeamError(f"{name} exited with code {rc} while starting; its log ({log}) ends:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(POLL_S)
    raise TeamError(f"{url} did not answer in {timeout_s:.0f} s")


class Stop(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived."""


def _on_signal(signum, frame) -> None:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # once: stopping the children is not interrupted again
    raise Stop(signal.Signals(signum).name)


def init_database(env: dict[str, str]) -> None:
    """The schema, once, before any server starts: a database that cannot be reached or upgraded is said here."""
    r = subprocess.run([sys.executable, "-m", "db", "init"], cwd=ROOT, env=env, capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        raise TeamError(f"the database DATABASE_URL names cannot be used: {_scrubbed((r.stderr or r.stdout).strip())}")


def serve(team: Team, children: Children, say=print) -> None:
    """Start the servers and nginx, wait until the proxy answers, then until a child exits or a signal comes."""
    nginx = find_nginx()
    env = server_env()
    init_database(env)
    team.prefix.mkdir(parents=True, exist_ok=True)
    for i, port in enumerate(team.server_ports, 1):
        children.start(f"server {i} (port {port})", server_argv(port, team.max_upload_mb),
                       team.prefix / f"server-{i}.log", env)
    for port in team.server_ports:
        wait_healthy(f"http://127.0.0.1:{port}/_stcore/health", children)
    write_config(team)
    check = subprocess.run(nginx_argv(nginx, team, "-t", "-q"), capture_output=True, text=True, check=False)
    if check.returncode != 0:
        raise TeamError(f"nginx refused {team.prefix / 'nginx.conf'}: {check.stderr.strip()}")
    children.start("nginx", nginx_argv(nginx, team, "-g", "daemon off;"), team.prefix / "logs" / "nginx.out")
    wait_healthy(f"{team.url}/_stcore/health", children)
    say(f"team.sh: serving {len(team.server_ports)} app servers (ports "
        f"{', '.join(map(str, team.server_ports))}) behind nginx at {team.url} (listening on {team.listen}); "
        f"logs in {team.prefix}. Ctrl-C stops them.", flush=True)
    while True:
        gone = children.exited()
        if gone:
            name, rc, log = gone
            raise TeamError(f"{name} exited with code {rc}; stopping the team. Its log ({log}) ends:\n{_tail(log)}")
        time.sleep(POLL_S * 5)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/team.sh", description=__doc__.split("\n\n")[0],
                                epilog="DATABASE_URL (required) names the team's PostgreSQL database.")
    p.add_argument("--servers", type=int, default=2, help="app servers to start (default 2)")
    p.add_argument("--port", default=str(DEFAULT_PORT),
                   help=f"nginx's port, the team's address (default {DEFAULT_PORT})")
    p.add_argument("--listen", default="0.0.0.0", help="nginx's address (default 0.0.0.0: every interface)")
    p.add_argument("--server-ports", default="", help="the app servers' ports on 127.0.0.1, comma-separated "
                                                      "(default: the ports after --port)")
    p.add_argument("--dir", default=str(DEFAULT_DIR), help="nginx's prefix: its config, pid, logs and the servers' "
                                                         "logs (default data/team)")
    p.add_argument("--max-upload-mb", type=int, default=MAX_UPLOAD_MB,
                   help=f"largest upload, in MB, for Streamlit and nginx alike (default {MAX_UPLOAD_MB})")
    p.add_argument("--print-config", action="store_true", help="print the nginx.conf this would run, then exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    children = Children()
    try:
        team = team_from_args(args)
        if args.print_config:
            print(render(team, nginx_user()), end="")
            return 0
        check_database_url(os.environ.get("DATABASE_URL", ""))
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, _on_signal)
        serve(team, children)
    except TeamError as e:
        print(f"team.sh: error: {e}", file=sys.stderr)
        return 2 if not children.procs else 1
    except Stop as e:
        print(f"team.sh: {e}: stopping the servers and nginx", file=sys.stderr)
        return 0
    finally:
        children.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
