"""Fixtures for the dashboard's tests: a fresh SQLite database per test (DATABASE_URL), the app under
streamlit.testing's AppTest, and a Store on the same database to assert what the pages stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.runtime.forward_msg_queue import ForwardMsgQueue
from streamlit.testing.v1 import AppTest

from db.store import Store

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "dashboard" / "app.py"
RUN_TIMEOUT_S = 120  # the first TorchRec planning imports torch


@pytest.fixture
def db_url(tmp_path, monkeypatch) -> str:
    url = f"sqlite:///{tmp_path / 'planner.db'}"
    monkeypatch.setenv("DATABASE_URL", url)
    return url


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    s.upgrade()
    yield s
    s.close()


@pytest.fixture
def app(db_url) -> AppTest:
    """The app after its first run (the Tables page, on the tutorial's config)."""
    at = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S)
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.fixture
def polls(monkeypatch) -> list[float]:
    """The polling a page's runs ask the browser for: the interval (s) of every `st.fragment(run_every=...)` called,
    in order. Each poll is a script run of its own, and Streamlit drops the messages of a full run whose thread
    ended before they were sent when a poll's run starts (dashboard.ui.workspace.job_box): a page polls only while
    it waits for something."""
    seen: list[float] = []
    enqueue = ForwardMsgQueue.enqueue

    def recording(self, msg) -> None:
        if msg.WhichOneof("type") == "auto_rerun":
            seen.append(msg.auto_rerun.interval)
        enqueue(self, msg)

    monkeypatch.setattr(ForwardMsgQueue, "enqueue", recording)
    return seen
