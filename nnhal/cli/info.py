"""``nnhal info ADDR``: the device table of a server (name, version string, type, feature
level, status, extensions, cache files, capabilities, limits, and for a compiling device the
operations of the models it prepared on its library and on the fallback inside it), one per
device it hosts.

A server hosting several devices first gets a summary (name, kind, type, level, status,
float32 and quant8 execution time relative to the CPU reference), then each device's
table. No server answering within ``--timeout`` seconds is a UsageError.
"""

from __future__ import annotations

import argparse

from nnhal.cli.connect import connect, tls_of
from nnhal.cli.table import print_table
from nnhal.client.device import Device, DeviceInfo, TlsConfig, list_devices
from nnhal.core.enums import HalVersion, OperandType
from nnhal.core.errors import HalError
from nnhal.core.types import Capabilities


def _level(value: int) -> str:
    """``NN HAL 1.3`` / ``NN HAL AIDL V4 (feature level 8)``; a number nnhal does not know is shown as is."""
    try:
        return f"NN HAL {HalVersion(value).label}"
    except ValueError:
        return f"unknown ({value})"


def _perf(caps: Capabilities, t: OperandType) -> str:
    for entry in caps.operand_performance:
        if entry.type == t:
            return f"{entry.info.exec_time:g}"
    return "-"


def _table(dev: Device) -> None:
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
    # Sorted: the server sends the limits as a map, whose order is not kept across runs.
    for key, value in sorted(dev.limits().items()):
        rows.append([f"limit: {key}", "unlimited" if value == 0 else str(value)])
    placed = placement_line(dev.stats())
    if placed:
        rows.append(["operations placed", placed])
    print_table(["property", "value"], rows)


def placement_line(stats: dict[str, int]) -> str:
    """A compiling device's placement from its getStats counts: operations on its library
    and on the fallback inside it (with the fallback's most frequent types); "" for others."""
    on_backend, on_fallback = stats.get("operations_on_backend", 0), stats.get("operations_on_fallback", 0)
    total = on_backend + on_fallback
    if total == 0:
        return ""
    prefix = "operations_on_fallback_"
    types = sorted(((n, k.removeprefix(prefix)) for k, n in stats.items() if k.startswith(prefix)), reverse=True)
    top = ", ".join(f"{name} {n}" for n, name in types[:5]) + (", ..." if len(types) > 5 else "")
    line = f"{on_backend} on the backend, {on_fallback} on the CPU fallback ({100 * on_fallback / total:.0f} %)"
    return line + (f": {top}" if top else "")


def _summary(devices: list[DeviceInfo]) -> None:
    rows = [
        [
            d.name + (" (default)" if k == 0 else ""),
            d.kind,
            d.type.name,
            _level(d.feature_level).removeprefix("NN HAL "),
            d.status.name,
            _perf(d.capabilities, OperandType.TENSOR_FLOAT32),
            _perf(d.capabilities, OperandType.TENSOR_QUANT8_ASYMM),
        ]
        for k, d in enumerate(devices)
    ]
    print_table(["device", "kind", "type", "level", "status", "f32 time", "q8 time"], rows)


def run(args: argparse.Namespace) -> int:
    tls = tls_of(args)
    with connect(args.address, "nnhal-info", args.timeout, tls) as dev:
        try:
            devices = list_devices(args.address, tls=TlsConfig.from_env() if tls is None else (tls or None))
        except HalError:  # a server without the device list hosts one device
            devices = []
        if len(devices) <= 1:
            _table(dev)
            return 0
    _summary(devices)
    for info in devices:
        print(f"\ndevice {info.name}")
        with connect(args.address, "nnhal-info", args.timeout, tls, info.name) as one:
            _table(one)
    return 0
