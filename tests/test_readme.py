"""The README's Python examples run verbatim: each program against a real server on loopback
(its address in place of the README's default one), the pytest example through pytest with the
plugin's fixtures. A README example that stops working fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from nnhal.testing.local_server import LocalServer

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ADDRESS = "127.0.0.1:50051"
pytestmark = pytest.mark.integration


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_readme_has_its_examples() -> None:
    blocks = _python_blocks()
    assert sum("def test_" in b for b in blocks) == 1
    assert sum("def test_" not in b for b in blocks) == 2


@pytest.mark.parametrize("index", [i for i, b in enumerate(_python_blocks()) if "def test_" not in b])
def test_readme_program_runs(index: int, server: LocalServer, tmp_path: Path) -> None:
    code = _python_blocks()[index]
    assert DEFAULT_ADDRESS in code, "the example names the default address"
    script = tmp_path / "example.py"
    script.write_text(code.replace(DEFAULT_ADDRESS, server.address))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "nnhal-cpu" in done.stdout and "Traceback" not in done.stderr


def test_readme_pytest_example_passes(tmp_path: Path) -> None:
    (code,) = [b for b in _python_blocks() if "def test_" in b]
    (tmp_path / "test_example.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "test_example.py"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_readme_is_short_and_its_links_exist() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300, "the README is an introduction; the guide is the site (docs/)"
    targets = {t.split("#")[0] for t in re.findall(r"\]\(([^)]+)\)", text) if "://" not in t}
    missing = sorted(t for t in targets if not (ROOT / t).exists())
    assert not missing, missing
