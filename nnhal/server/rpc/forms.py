"""Registers the HIDL 1.0-1.2 and AIDL method forms (``hidl.proto``, ``aidl.proto``) on a server.

Kept apart from ``serve`` so the server assembly gains one call: ``add_method_forms``
adds every servicer of those files and returns their full service names (for
reflection and health).
"""

from __future__ import annotations

from typing import Any

from nnhal.proto import aidl_pb2 as apb, aidl_pb2_grpc as agrpc, hidl_pb2 as hpb, hidl_pb2_grpc as hgrpc
from nnhal.server.executions import Executions
from nnhal.server.rpc.aidl_objects_servicer import BurstServicer, ExecutionServicer
from nnhal.server.rpc.aidl_servicer import (
    AidlDeviceServicer,
    AidlFencedExecutionCallbackServicer,
    AidlPreparedModelServicer,
)
from nnhal.server.rpc.hidl_servicer import HidlDeviceServicer, HidlPreparedModelServicer

SERVICE_NAMES = (
    *(hpb.DESCRIPTOR.services_by_name[n].full_name for n in ("HidlDevice", "HidlPreparedModel")),
    *(
        apb.DESCRIPTOR.services_by_name[n].full_name
        for n in ("AidlDevice", "AidlPreparedModel", "AidlFencedExecutionCallback", "Execution", "Burst")
    ),
)


def add_method_forms(server: Any, executions: Executions) -> tuple[str, ...]:
    """Serve the HIDL 1.0-1.2 and AIDL forms of a device (its ``executions``) on ``server`` (a
    server, or what stands in for one: ``sync_handlers.Collector``); their service names."""
    hgrpc.add_HidlDeviceServicer_to_server(HidlDeviceServicer(executions), server)
    hgrpc.add_HidlPreparedModelServicer_to_server(HidlPreparedModelServicer(executions), server)
    agrpc.add_AidlDeviceServicer_to_server(AidlDeviceServicer(executions), server)
    agrpc.add_AidlPreparedModelServicer_to_server(AidlPreparedModelServicer(executions), server)
    agrpc.add_AidlFencedExecutionCallbackServicer_to_server(AidlFencedExecutionCallbackServicer(executions), server)
    agrpc.add_ExecutionServicer_to_server(ExecutionServicer(executions), server)
    agrpc.add_BurstServicer_to_server(BurstServicer(executions), server)
    return SERVICE_NAMES
