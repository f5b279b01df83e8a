"""The ``nnhal`` command line: serve, info, run, conformance, bench (DESIGN §11)."""

from nnhal.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
