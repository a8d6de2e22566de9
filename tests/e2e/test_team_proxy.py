"""A team's deployment for real: a throwaway PostgreSQL, two app servers and nginx started by scripts/team.sh, driven
through the proxy by headless Chromium. The sticky cookie keeps each browser's requests (page, websocket, upload)
on one server; a plan saved through server A opens from its share link on server B; a run started on A is listed
with its status and log on B; SIGTERM stops every process team.sh started. Without nginx, PostgreSQL or Chromium
the test is skipped, except with CI=true, where it fails. Also: team.sh refuses SQLite and bad options in one line,
and the nginx config it writes passes `nginx -t`."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from db.store import Store
from tests.db.conftest import PgDatabases, pg_admin_url  # noqa: F401 - pg_admin_url: the session fixture
from tests import processes
from tests.e2e.conftest import ROOT, need_browser, scaled_ms, until
from tests.e2e.test_browser import _plan_view_ready

VIEWPORT = {"width": 1280, "height": 800}
UI_TIMEOUT_MS = 60_000
RUN_TIMEOUT_MS = 150_000  # a kernel dry-run (it imports torch), on an idle machine; scaled for the load
START_TIMEOUT_S = 120  # two servers importing torch, on an idle machine; scaled for the load
STOP_TIMEOUT_S = 60
ROUTE_COOKIE = "planner_route"
SERVER_HEADER = "x-planner-server"
LABEL = "team plan <b>from A</b>"

pytestmark = pytest.mark.timeout(900)


def need_nginx() -> str:
    """nginx's path; skip (fail under CI=true) when it is missing."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if found:
        return found
    message = "missing: nginx (apt-get install nginx; scripts/install.sh --dev does)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _get(url: str, cookie: str | None = None) -> tuple[bytes, str]:
    """The body and the X-Planner-Server header of a GET through the proxy."""
    req = urllib.request.Request(url, headers={"Cookie": f"{ROUTE_COOKIE}={cookie}"} if cookie else {})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read(), r.headers.get(SERVER_HEADER, "")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class TeamProcess:
    """scripts/team.sh on a fresh PostgreSQL database: the proxy's url, the servers' addresses, its dir."""

    def __init__(self, tmp_path: Path, db_url: str):
        self.port, *self.server_ports = _free_ports(3)
        self.url = f"http://127.0.0.1:{self.port}"
        self.servers = {f"127.0.0.1:{p}" for p in self.server_ports}
        self.dir = tmp_path / "team"
        self.out = tmp_path / "team.out"
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                ["bash", "scripts/team.sh", "--port", str(self.port), "--listen", "127.0.0.1",
                 "--server-ports", ",".join(map(str, self.server_ports)), "--dir", str(self.dir)],
                cwd=ROOT, env={**os.environ, "DATABASE_URL": db_url}, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def _serves(self) -> bool:
        try:
            return _get(f"{self.url}/_stcore/health")[0] == b"ok"
        except OSError:
            return False

    def wait_healthy(self) -> None:
        until(lambda: self.proc.poll() is not None or self._serves(), "team.sh's proxy to answer its health check",
              START_TIMEOUT_S, shows=lambda: self.out.read_text()[-3000:])
        if self.proc.poll() is not None:
            pytest.fail(f"team.sh exited {self.proc.poll()}: {self.out.read_text()[-3000:]}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def cookie_for(self, server: str) -> str:
        """A route cookie that nginx's consistent hash sends to `server` (found by asking the proxy)."""
        for i in range(1, 200):
            cookie = f"{i:032x}"
            if _get(f"{self.url}/_stcore/health", cookie)[1] == server:
                return cookie
        raise AssertionError(f"no route cookie of 199 reaches {server}")

    def access_log(self) -> list[tuple[str, str, str]]:
        """(route, upstream, request line) of every request nginx logged."""
        pattern = re.compile(r'route=(\S+) upstream=(\S*(?:, \S+)*) status=\d+ bytes=\d+ "(.*)"$')
        lines = (self.dir / "logs" / "access.log").read_text().splitlines()
        return [m.groups() for m in map(pattern.search, lines) if m]

    def diagnosis(self, tail: int = 40) -> str:
        """For a failure: what nginx logged (requests of the session's paths: the websocket, uploads; its errors)
        and the servers' own logs, the last lines of each: which server answered what, and with which status."""
        logs = self.dir / "logs"
        access = [line for line in _lines(logs / "access.log") if "/_stcore/stream" in line or "upload_file" in line]
        parts = [("nginx access.log (websocket and upload requests)", access), ("nginx error.log", _lines(
            logs / "error.log"))] + [(f"{p.name}", _lines(p)) for p in sorted(self.dir.glob("server-*.log"))]
        return "\n".join(f"--- {name}, last {min(len(lines), tail)} of {len(lines)} lines\n" + "\n".join(lines[-tail:])
                         for name, lines in parts)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError as e:
        return [f"(not read: {type(e).__name__})"]


@pytest.fixture
def team(pg_admin_url, tmp_path):  # noqa: F811 - the fixture imported above
    need_browser()
    need_nginx()
    dbs = PgDatabases(pg_admin_url)
    db_url = dbs.new()
    proc = TeamProcess(tmp_path, db_url)
    try:
        proc.wait_healthy()
        yield proc, db_url
    finally:
        proc.stop()
        processes.kill_tree(proc.proc.pid, group=proc.proc.pid)  # what its own stop left (nginx, the servers)
        dbs.drop_all()


class Seen:
    """The server (X-Planner-Server) of every response one browser context got, its websocket's handshake too
    (read through Chrome's DevTools protocol: Playwright does not show a websocket's response headers)."""

    def __init__(self, context, page):
        self.http: list[tuple[str, str]] = []
        self.websocket: list[str] = []
        context.on("response", lambda r: self.http.append((r.url, r.headers.get(SERVER_HEADER, ""))))
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.on("Network.webSocketHandshakeResponseReceived", self._handshake)

    def _handshake(self, event: dict) -> None:
        headers = {k.lower(): v for k, v in event["response"]["headers"].items()}
        self.websocket.append(headers.get(SERVER_HEADER, ""))

    def servers(self) -> set[str]:
        return {s for _, s in self.http} | set(self.websocket)


def _page(browser, cookie: tuple[str, str] | None = None):
    context = browser.new_context(viewport=VIEWPORT)
    if cookie:
        context.add_cookies([{"name": ROUTE_COOKIE, "value": cookie[1], "url": cookie[0]}])
    page = context.new_page()
    page.set_default_timeout(scaled_ms(UI_TIMEOUT_MS))
    return context, page, Seen(context, page)


def _three_tables(tmp_path: Path) -> Path:
    """examples/tutorial.json less one table: an upload whose effect shows (Tables (3))."""
    cfg = json.loads((ROOT / "examples" / "tutorial.json").read_text())
    gone = cfg["tables"].pop()["name"]
    cfg.get("constraints", {}).pop(gone, None)
    path = tmp_path / "three_tables.json"
    path.write_text(json.dumps(cfg))
    return path


def _upload_plan_and_save(page, url: str, config: Path) -> str:
    """Through the proxy: upload a config (st.file_uploader), plan it, save it with LABEL; returns the share link."""
    page.goto(url)
    page.wait_for_selector('[data-testid="stDataFrame"]')
    page.get_by_role("button", name="Import", exact=True).click()
    page.locator('[data-testid="stPopoverBody"] input[type="file"]').set_input_files(str(config))
    # the server holds the whole file (the uploader shows the name while it still uploads)
    page.locator('[data-testid="stPopoverBody"]').get_by_text(f"Ready to import: {config.name} (").wait_for()
    page.locator('[data-testid="stPopoverBody"]').get_by_role("button", name="Import", exact=True).click()
    page.get_by_role("tab", name="Tables (3)").wait_for()
    page.keyboard.press("Escape")
    page.get_by_role("link", name="Plan").click()
    page.get_by_role("button", name="Plan", exact=True).click()
    page.get_by_text(re.compile(r"^Planned 3 tables on 2 ranks")).wait_for()
    _plan_view_ready(page)
    page.get_by_role("link", name="Save & share").click()
    page.get_by_label("Label").fill(LABEL)
    page.get_by_role("button", name="Save plan").click()
    link = page.locator('[data-testid="stCode"]').filter(has_text="?plan=").first
    link.wait_for()
    return link.inner_text().strip()


def _start_dry_run(page) -> int:
    """On the Runs page of the saved plan: the smallest run the app offers (a kernel dry-run, 1 timed step)."""
    page.get_by_role("link", name="Runs").click()
    page.get_by_role("heading", name="Runs", exact=True).wait_for()
    page.get_by_text("Kernel dry-run", exact=False).first.click()
    box = page.locator(".st-key-runs_iters input")
    box.fill("1")
    box.press("Enter")
    page.get_by_role("button", name="Start", exact=True).click()
    started = page.get_by_text(re.compile(r"^Started run \d+\.$"))
    started.wait_for()
    return int(re.search(r"\d+", started.inner_text()).group())


def _see_shared_plan(page, share_url: str) -> None:
    page.goto(share_url)
    page.get_by_role("heading", name=LABEL).wait_for()
    page.get_by_text(re.compile(r"^Read-only")).wait_for()
    _plan_view_ready(page)


def test_two_servers_behind_nginx_share_plans_and_runs(team, browser, tmp_path):
    proc, db_url = team
    a_ctx, a, a_seen = _page(browser)  # no cookie: nginx picks a server and sets the cookie
    try:
        share_url = _upload_plan_and_save(a, proc.url, _three_tables(tmp_path))
        (server_a,) = a_seen.servers()  # every response of this browser: one server, the websocket's included
        assert server_a in proc.servers and set(a_seen.websocket) == {server_a}
        assert any("/_stcore/upload_file" in u for u, _ in a_seen.http)
        route_a = next(c["value"] for c in a_ctx.cookies() if c["name"] == ROUTE_COOKIE)
        assert re.fullmatch(r"[0-9a-f]{32}", route_a)
        assert share_url.startswith(f"{proc.url}/?plan=")  # the proxy's address, not a server's
        run_id = _start_dry_run(a)
    except Exception as e:
        a.screenshot(path=str(tmp_path / "failure_a.png"))
        e.add_note(proc.diagnosis())
        raise

    (server_b,) = proc.servers - {server_a}
    b_ctx, b, b_seen = _page(browser, (proc.url, proc.cookie_for(server_b)))
    try:
        _see_shared_plan(b, share_url)  # the share link, through the proxy, on server B
        b.goto(f"{proc.url}/runs")
        b.get_by_role("heading", name="Runs", exact=True).wait_for()
        b.locator('[data-testid="stAlertContentSuccess"]').filter(
            has_text=re.compile(rf"Run {run_id} \(dryrun, .*\): succeeded")).wait_for(timeout=scaled_ms(RUN_TIMEOUT_MS))
        b.get_by_text("Log", exact=True).click()
        b.locator('[data-testid="stCode"]').filter(has_text="-m db dryrun").first.wait_for()
        assert b_seen.servers() == {server_b} and set(b_seen.websocket) == {server_b}
        _see_shared_plan(b, f"http://{server_b}/?plan={share_url.split('?plan=', 1)[1]}")  # B itself, no proxy
        b.screenshot(path=str(tmp_path / "b_runs.png"))
    except Exception as e:
        b.screenshot(path=str(tmp_path / "failure_b.png"))
        e.add_note(proc.diagnosis())
        raise
    a.locator('[data-testid="stAlertContentSuccess"]').filter(has_text=f"Run {run_id} (").wait_for(
        timeout=scaled_ms(RUN_TIMEOUT_MS))  # A, which runs it, sees it end too

    store = Store(db_url)
    try:
        (plan,) = store.list_plans()
        assert plan.label == LABEL and plan.num_tables == 3
        assert str(store.get_run(run_id).status) == "succeeded"
    finally:
        store.close()
    route_b = next(c["value"] for c in b_ctx.cookies() if c["name"] == ROUTE_COOKIE)
    a_ctx.close()
    b_ctx.close()

    assert proc.stop() == 0
    assert not any(_listening(p) for p in (proc.port, *proc.server_ports))  # every child of team.sh is gone
    log = proc.access_log()  # complete now: nginx logs a websocket when it closes
    for route, server in ((route_a, server_a), (route_b, server_b)):
        mine = [(upstream, request) for r, upstream, request in log if r == route]
        assert {upstream for upstream, _ in mine} == {server}
        assert any("/_stcore/stream" in request for _, request in mine)
    assert any("/_stcore/upload_file" in request for r, _, request in log if r == route_a)


@pytest.mark.parametrize("db_url, says", [
    ("", "DATABASE_URL is not set"),
    ("sqlite:////tmp/planner.db", "DATABASE_URL names SQLite: a team's servers share one PostgreSQL database"),
    ("mysql://planner:secret@db/planner", "DATABASE_URL names mysql"),
    ("not a url", "DATABASE_URL is not a database URL"),
])
def test_team_sh_refuses_a_database_a_team_cannot_share(db_url, says, tmp_path):
    r = subprocess.run(["bash", "scripts/team.sh", "--dir", str(tmp_path / "team")], cwd=ROOT, capture_output=True,
                       text=True, env={**os.environ, "DATABASE_URL": db_url}, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith(f"team.sh: error: {says}") and "Traceback" not in r.stderr
    assert "secret" not in r.stderr and not (tmp_path / "team").exists()  # nothing started, no password shown


@pytest.mark.parametrize("args, says", [
    (["--servers", "0"], "--servers: from 1 to 64, got 0"),
    (["--port", "70000"], "--port: a port is a number from 1 to 65535, got '70000'"),
    (["--server-ports", "9001"], "--server-ports: 2 ports for --servers 2, got 1"),
    (["--server-ports", "9001,9001"], "--server-ports: every server needs its own port"),
    (["--listen", "example.com"], "--listen: an IP address"),
    (["--dir", "/tmp/a b;}"], "--dir: nginx's directory may hold only letters, digits"),
])
def test_team_sh_names_the_bad_option(args, says):
    r = subprocess.run(["bash", "scripts/team.sh", *args, "--print-config"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith(f"team.sh: error: {says}") and "Traceback" not in r.stderr


def test_the_generated_nginx_config_is_valid(tmp_path):
    """What team.sh would run passes `nginx -t`; the template's slots hold the numbers and the path given."""
    nginx = need_nginx()
    prefix = tmp_path / "team"
    r = subprocess.run(["bash", "scripts/team.sh", "--print-config", "--servers", "3", "--port", "18500",
                        "--dir", str(prefix)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    conf = r.stdout
    assert "@@" not in conf and conf.count("server 127.0.0.1:") == 3 and "server 127.0.0.1:18503 " in conf
    assert "listen 0.0.0.0:18500;" in conf and "client_max_body_size 200m;" in conf
    # no connection kept to a server: reusing one as the server closed it moved a browser to the other server
    assert not re.search(r"^\s*keepalive\b", conf, re.MULTILINE)
    for sub in ("logs", "tmp"):
        (prefix / sub).mkdir(parents=True)
    (prefix / "nginx.conf").write_text(conf)
    t = subprocess.run([nginx, "-p", f"{prefix}/", "-c", str(prefix / "nginx.conf"), "-e",
                        str(prefix / "logs" / "error.log"), "-t"], capture_output=True, text=True, timeout=60)
    assert t.returncode == 0, t.stderr


def test_every_team_sh_option_is_in_docs_deploy():
    from deploy.team import build_parser

    docs = (ROOT / "docs" / "deploy.md").read_text()
    options = [s for a in build_parser()._actions for s in a.option_strings if s.startswith("--") and s != "--help"]
    assert len(options) == 7 and [o for o in options if f"`{o}" not in docs] == []
