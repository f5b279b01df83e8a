"""Exit 0 when the nnhal server at ADDR reports SERVING through grpc.health.v1 (Docker HEALTHCHECK)."""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    address = args[0] if args else "127.0.0.1:50051"
    try:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="nnhal.v1.Device"), timeout=3.0
            )
    except grpc.RpcError as err:
        print(f"unhealthy: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    print("serving" if serving else f"not serving ({reply.status})")
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
