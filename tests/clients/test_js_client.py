"""The JavaScript client (``clients/js``, grpc-js from ``protos/``) against a real server.

It is the protocol's test in another language: everything it does is written in the
protocol reference, none of it comes from the Python client. ``make test`` installs its
npm packages (``make js-setup``). Without Node.js or those packages the test is skipped,
except in CI (``CI=true``), where a missing toolchain fails the run.

The demo's output is kept as the test's ``client_output`` property, which the suite's
summary prints (``tests/conftest.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from nnhal.testing.local_server import LocalServer

pytestmark = pytest.mark.integration

JS_DIR = Path(__file__).resolve().parents[2] / "clients" / "js"
DEMO_TIMEOUT_S = 90.0


def _node() -> str:
    """The node executable, once the packages are installed; skips (fails in CI) otherwise."""
    node = shutil.which("node")
    missing = (
        "node is not on PATH"
        if node is None
        else "clients/js/node_modules is missing (run `make js-setup`)"
        if not (JS_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir()
        else ""
    )
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the JavaScript client cannot run in CI: {missing}")
        pytest.skip(f"the JavaScript client cannot run: {missing}")
    assert node is not None
    return node


def _demo(node: str, *args: str) -> str:
    done = subprocess.run(
        [node, str(JS_DIR / "demo.js"), *args],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"the JS demo failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_js_client_session_queries_prepare_execute_and_errors(record_property: Callable[[str, object], None]) -> None:
    node = _node()
    with LocalServer() as srv:
        out = _demo(node, srv.address)
    record_property("client_output", "node clients/js/demo.js ADDRESS\n" + out)
    assert "executeSynchronously_1_3: NONE, [1,2,3,4] + [10,20,30,40] = [11,22,33,44]" in out
    assert "execute_1_3: launch NONE, notify NONE, [10.5,20.5,30.5,40.5]" in out
    assert "invalid model: launch INVALID_ARGUMENT, notify INVALID_ARGUMENT" in out
    assert "handshake: protocol 2" in out and '"MEDIUM":1' in out
    assert out.rstrip().endswith("ok")


def test_js_client_sees_a_sigkill_as_its_streams_failing(record_property: Callable[[str, object], None]) -> None:
    node = _node()
    with LocalServer("--enable-fault-injection") as srv:
        out = _demo(node, srv.address, "--kill-server", str(srv.pid))
        assert srv.proc.wait(10) == -9
    record_property("client_output", "node clients/js/demo.js ADDRESS --kill-server PID\n" + out)
    assert "session stream failed after" in out and ": DEAD_OBJECT (" in out
    assert "execution in flight: DEAD_OBJECT" in out
