"""The Dockerfile, checked without a Docker engine: its shape, its build context
(.dockerignore), its install step (building the package as `pip install .` does),
and its start + health steps run on loopback: the CMD through `sh -c` as Docker
runs it (the port from NNHAL_PORT, `exec` so SIGTERM reaches the server, the cache
secret created on the volume), the HEALTHCHECK reading NNHAL_PORT or
NNHAL_HEALTH_ADDRESS."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

import pytest

from nnhal.server.devices import KINDS
from nnhal.testing.child import ChildServer
from nnhal.testing.local_server import LocalServer
from nnhal.tools.healthcheck import AddressError, resolve_address

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration


def _instructions() -> list[tuple[str, str]]:
    lines = (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    out = []
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _exec_form(text: str) -> list[str]:
    return list(json.loads(text)) if text.startswith("[") else shlex.split(text)


def _env() -> dict[str, str]:
    """The image's ENV (key=value pairs)."""
    env: dict[str, str] = {}
    for kind, value in _instructions():
        if kind == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(value))  # type: ignore[misc]
    return env


def _cmd() -> list[str]:
    return _exec_form(next(v for k, v in _instructions() if k == "CMD"))


def _served(port: str = "50051") -> list[str]:
    """The command the CMD's shell execs, with ${NNHAL_PORT} expanded as sh would."""
    cmd = _cmd()
    assert cmd[:2] == ["sh", "-c"] and len(cmd) == 3, cmd
    words = shlex.split(cmd[2].replace("${NNHAL_PORT}", port))
    assert words[0] == "exec", "the shell must exec nnhal, or SIGTERM stops at the shell"
    return words[1:]


def _health() -> list[str]:
    health = _exec_form(next(v for k, v in _instructions() if k == "HEALTHCHECK").split(" CMD ", 1)[1])
    return [sys.executable if health[0] == "python" else health[0], *health[1:]]


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _without(args: list[str], *names: str) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        else:
            out.append(arg)
    return out


def test_dockerfile_shape() -> None:
    ins = _instructions()
    kinds = [k for k, _ in ins]
    # Pinned: a patch release of Python on a named Debian release, never a moving tag.
    assert ins[0][0] == "FROM" and re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+", ins[0][1]), ins[0][1]
    user = [v for k, v in ins if k == "USER"]
    assert user and user[-1] not in ("root", "0") and not user[-1].startswith("0:")
    assert "50051" in [v for k, v in ins if k == "EXPOSE"]
    assert "HEALTHCHECK" in kinds and kinds.index("USER") < kinds.index("CMD")
    assert _served()[:2] == ["nnhal", "serve"]
    assert _env()["NNHAL_PORT"] == "50051"
    # The HEALTHCHECK names no address: it follows NNHAL_PORT like the CMD.
    assert _health()[1:] == ["-m", "nnhal.tools.healthcheck"]


def test_cache_secret_lives_on_a_volume_owned_by_the_user() -> None:
    ins = _instructions()
    secret = Path(_option(_served(), "--cache-secret-file"))
    volumes = [v for k, v in ins if k == "VOLUME"]
    assert str(secret.parent) in volumes
    uid = re.search(r"--uid (\d+)", next(v for k, v in ins if k == "RUN" and "useradd" in v))
    assert uid is not None
    assert any(k == "RUN" and f"-o {uid[1]}" in v and str(secret.parent) in v for k, v in ins)
    assert [v for k, v in ins if k == "USER"][-1].split(":")[0] in (uid[1], "nnhal")


def test_shared_memory_is_off_as_in_the_kubernetes_manifest() -> None:
    assert _option(_served(), "--shm-dir") == "none"


def test_build_context_is_an_allowlist_of_what_the_image_copies() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "everything is excluded first (venv, .git, caches, reports)"
    included = {line[1:] for line in lines if line.startswith("!")}
    copied = {src for k, v in _instructions() if k == "COPY" for src in shlex.split(v)[:-1]}
    assert copied == included
    assert {"**/__pycache__", "**/*.py[co]"} <= set(lines)


def test_install_step_builds_a_complete_package(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        timeout=300,
    )
    wheel = next(tmp_path.glob("nnhal-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    needed_files = (
        "nnhal/proto/service_pb2.py",
        "nnhal/proto/types_pb2.pyi",
        "nnhal/cli/main.py",
        "nnhal/py.typed",
        # The benchmarks' and the importer's models, with their attribution (nnhal.models).
        "nnhal/models/tflite/face_detection_short_range.tflite",
        "nnhal/models/tflite/face_landmark.tflite",
        "nnhal/models/tflite/README.md",
    )
    for needed in needed_files:
        assert needed in names, needed
    assert any(n.endswith("entry_points.txt") for n in names)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """The CMD's server, bound to loopback and an ephemeral port (tests never listen elsewhere),
    its cache secret in a temporary folder instead of the volume."""
    secret = tmp_path_factory.mktemp("volume") / "cache-secret"
    args = _without(_served()[2:], "--listen", "--cache-secret-file")
    with LocalServer(*args, "--cache-secret-file", str(secret)) as srv:
        yield srv


def _probe(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("NNHAL_PORT", "NNHAL_HEALTH_ADDRESS")}
    return subprocess.run([*_health(), *args], capture_output=True, text=True, timeout=30, env={**clean, **env})


def test_start_and_health_steps_on_loopback(server: LocalServer) -> None:
    # The HEALTHCHECK exactly as Docker runs it: no argument, the port from NNHAL_PORT.
    done = _probe(NNHAL_PORT=server.address.rpartition(":")[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "serving"


def test_healthcheck_address_precedence(server: LocalServer) -> None:
    # NNHAL_HEALTH_ADDRESS beats NNHAL_PORT (port 1: nothing listens there).
    done = _probe(NNHAL_HEALTH_ADDRESS=server.address, NNHAL_PORT="1")
    assert (done.returncode, done.stdout.strip()) == (0, "serving"), done.stderr
    # An argument beats both.
    done = _probe(server.address, NNHAL_HEALTH_ADDRESS="127.0.0.1:1")
    assert (done.returncode, done.stdout.strip()) == (0, "serving"), done.stderr
    assert resolve_address([], {}) == "127.0.0.1:50051"
    assert resolve_address([], {"NNHAL_PORT": "6000"}) == "127.0.0.1:6000"
    assert resolve_address([], {"NNHAL_PORT": "6000", "NNHAL_HEALTH_ADDRESS": "unix:/s"}) == "unix:/s"


def test_healthcheck_fails_cleanly() -> None:
    # Docker reserves exit status 2 for HEALTHCHECK, so a bad setting is unhealthy (1), one line.
    for bad in ("http", "0", "70000"):
        done = _probe(NNHAL_PORT=bad)
        assert done.returncode == 1
        assert done.stderr.startswith("nnhal-healthcheck: error: NNHAL_PORT") and done.stderr.count("\n") == 1
    with pytest.raises(AddressError):
        resolve_address(["a:1", "b:2"], {})
    done = _probe(NNHAL_PORT="1")  # nobody listens on port 1
    assert done.returncode == 1 and done.stderr.startswith("unhealthy: 127.0.0.1:1: ")
    assert "Traceback" not in done.stderr


SHIM = """#!{python}
# Stands in for the installed `nnhal`: records what the CMD's shell passed and its pid,
# then becomes `python -m nnhal` (same process) on loopback with a port file.
import json, os, sys
args = sys.argv[1:]
with open({record!r}, "w") as f:
    json.dump({{"argv": args, "pid": os.getpid()}}, f)
args[args.index("--listen") + 1] = {listen!r}
args[args.index("--cache-secret-file") + 1] = {secret!r}
os.execv(sys.executable, [sys.executable, "-m", "nnhal", *args, "--port-file", {port_file!r}])
"""


def test_cmd_expands_the_port_and_execs_so_sigterm_reaches_the_server(tmp_path: Path) -> None:
    record, secret = tmp_path / "argv.json", tmp_path / "volume" / "cache-secret"
    (tmp_path / "bin").mkdir()
    shim = tmp_path / "bin" / "nnhal"

    def command(listen: str, port_file: Path) -> list[str]:
        shim.write_text(
            SHIM.format(
                python=sys.executable, record=str(record), listen=listen, secret=str(secret), port_file=str(port_file)
            )
        )
        shim.chmod(0o755)
        path = f"{shim.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        # `env` execs sh in place, so the child's pid is the shell's pid.
        return ["env", "NNHAL_PORT=50999", f"PATH={path}", *_cmd()]

    srv = ChildServer(command, prefix="nnhal-docker-")
    try:
        seen = json.loads(record.read_text())
        assert ["nnhal", *seen["argv"]] == _served("50999")  # the shell expanded ${NNHAL_PORT}
        assert seen["pid"] == srv.pid  # ... and exec'd: no shell left between Docker and nnhal
        # The secret is created on the (empty) volume on first start, private to the user.
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(secret.read_bytes()) == 32
        done = _probe(NNHAL_PORT=srv.address.rpartition(":")[2])
        assert done.stdout.strip() == "serving", done.stderr
        srv.signal(signal.SIGTERM)
        assert srv.proc.wait(60) == 0, srv.log()
    finally:
        srv.stop()


def test_install_step_brings_every_device_kind() -> None:
    """The image installs the extra of every device kind that needs one, so NNHAL_DEVICE (or
    --device) can name any of them; an extra the project does not declare would fail the build."""
    installs = [v for k, v in _instructions() if k == "RUN" and "pip install" in v]
    assert len(installs) == 1, installs
    extras_of = re.search(r"\"\.\[([a-z,]+)\]\"", installs[0])
    assert extras_of is not None, installs[0]
    extras = set(extras_of[1].split(","))
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras <= set(declared), extras - set(declared)
    assert set(KINDS) - {"cpu"} <= extras, set(KINDS) - {"cpu"} - extras
