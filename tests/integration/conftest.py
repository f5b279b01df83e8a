"""Fixtures shared by the integration tests."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from nnhal.cli import config
from nnhal.cli.serve import server_options
from nnhal.server.rpc.serve import Server


@pytest.fixture
def litert_server() -> Iterator[Server]:
    """A litert device served in this process (needs ``ai_edge_litert``: skipped without it)."""
    pytest.importorskip("ai_edge_litert")
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    args = parser.parse_args(["--device", "litert", "--cache-secret-file", "none", "--listen", "127.0.0.1:0"])
    server = Server(server_options(config.resolve(args, {})))
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=0)
