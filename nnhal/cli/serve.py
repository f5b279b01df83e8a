"""``nnhal serve``: run a driver hosting the CPU device until SIGTERM / SIGINT (DESIGN §11, §12)."""

from __future__ import annotations

import argparse
from pathlib import Path

from nnhal.core.enums import HalVersion
from nnhal.server.cache import load_secret
from nnhal.server.driver import DeviceConfig
from nnhal.server.memory import SharedMemoryPolicy
from nnhal.server.rpc.serve import ServerOptions, run_forever

FEATURE_LEVELS = {"1.0": HalVersion.V1_0, "1.1": HalVersion.V1_1, "1.2": HalVersion.V1_2, "1.3": HalVersion.V1_3}


def run(args: argparse.Namespace) -> int:
    shm = None
    if args.shm_dir != "none":
        shm_dir = Path(args.shm_dir)
        if not shm_dir.is_dir():
            print(f"nnhal serve: shared-memory directory {shm_dir} does not exist (use --shm-dir none to disable)")
            return 2
        shm = SharedMemoryPolicy(shm_dir.resolve(), args.shm_prefix, args.shm_allow_remote)
    device = DeviceConfig(
        name=args.name,
        feature_level=FEATURE_LEVELS[args.feature_level],
        shared_memory=shm,
        slots=args.slots,
        queue_depth=args.queue_depth,
        memory_per_client=args.memory_per_client,
        memory_total=args.memory_total,
        max_sessions=args.max_sessions,
        fault_injection=args.enable_fault_injection,
        cache_secret=load_secret(None if args.cache_secret_file == "none" else Path(args.cache_secret_file)),
    )
    options = ServerOptions(
        listen=args.listen or ["127.0.0.1:50051"],
        port_file=Path(args.port_file) if args.port_file else None,
        max_threads=args.max_threads,
        device=device,
    )
    run_forever(options)
    return 0
