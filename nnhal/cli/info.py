"""``nnhal info ADDR``: the device table of a server (name, version string, type, feature
level, status, extensions, cache files, capabilities, limits). No server answering within
``--timeout`` seconds is a UsageError."""

from __future__ import annotations

import argparse

from nnhal.cli.connect import connect, tls_of
from nnhal.cli.table import print_table
from nnhal.core.enums import HalVersion


def _level(value: int) -> str:
    """``NN HAL 1.3`` / ``NN HAL AIDL V4 (feature level 8)``; a number nnhal does not know is shown as is."""
    try:
        return f"NN HAL {HalVersion(value).label}"
    except ValueError:
        return f"unknown ({value})"


def run(args: argparse.Namespace) -> int:
    with connect(args.address, "nnhal-info", args.timeout, tls_of(args)) as dev:
        caps = dev.capabilities()
        n_model, n_data = dev.number_of_cache_files_needed()
        rows = [
            ["name", dev.name],
            ["version", dev.version_string()],
            ["type", dev.type().name],
            ["feature level", _level(dev.feature_level)],
            ["status", dev.status().name],
            ["extensions", ", ".join(e.name for e in dev.supported_extensions()) or "none"],
            ["cache files", f"{n_model} model, {n_data} data"],
            ["operand types with performance", str(len(caps.operand_performance))],
            ["relaxed fp32->fp16 perf", f"{caps.relaxed_float32_to_float16_performance_tensor.exec_time:g}"],
        ]
        for key, value in dev.limits().items():
            rows.append([f"limit: {key}", "unlimited" if value == 0 else str(value)])
        print_table(["property", "value"], rows)
    return 0
