"""The handshake's arithmetic and what omitted fields mean per protocol version."""

from __future__ import annotations

import pytest

from nnhal.core import wire_session as ws
from nnhal.core.enums import ErrorStatus, ExecutionPreference, Priority
from nnhal.core.errors import InvalidArgument, ResourceExhaustedTransient
from nnhal.proto import aidl_pb2 as apb, hidl_pb2 as hpb, service_pb2 as spb, types_pb2 as tpb


def test_versions_negotiate_down_and_an_omitted_one_is_1() -> None:
    assert ws.version_of(0) == 1 and ws.negotiate(0) == 1
    assert ws.negotiate(2) == 2 and ws.negotiate(99) == ws.PROTOCOL_VERSION


def test_a_version_no_longer_served_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ws, "MIN_PROTOCOL_VERSION", 2)
    with pytest.raises(InvalidArgument, match="protocol version 1 is no longer served; this server speaks 2 to 2"):
        ws.negotiate(0)


@pytest.mark.parametrize(
    "msg",
    [spb.PrepareModelRequest(), apb.PrepareModelConfig()],
)
def test_omitted_priority_and_preference_are_nnapis_defaults_from_protocol_2(msg: object) -> None:
    assert ws.priority_of(msg, 2) == Priority.MEDIUM
    assert ws.preference_of(msg, 2) == ExecutionPreference.FAST_SINGLE_ANSWER
    # Protocol 1 clients omit a field that is zero: they asked for LOW / LOW_POWER.
    assert ws.priority_of(msg, 1) == Priority.LOW
    assert ws.preference_of(msg, 1) == ExecutionPreference.LOW_POWER


def test_explicit_values_are_kept_and_bad_ones_refused() -> None:
    msg = spb.PrepareModelRequest(priority=0, preference=tpb.LOW_POWER)
    assert ws.priority_of(msg, 2) == Priority.LOW and ws.preference_of(msg, 2) == ExecutionPreference.LOW_POWER
    assert ws.preference_of(hpb.PrepareModelV1_1Request(), 2) == ExecutionPreference.FAST_SINGLE_ANSWER
    with pytest.raises(InvalidArgument, match="priority 7"):
        ws.priority_of(spb.PrepareModelRequest(priority=7), 2)
    with pytest.raises(InvalidArgument, match="preference 9"):
        ws.preference_of(spb.PrepareModelRequest(preference=9), 2)  # type: ignore[arg-type]


def test_an_omitted_fault_count_is_1_from_protocol_2() -> None:
    assert ws.fault_count_of(spb.InjectedFault(), 2) == 1
    assert ws.fault_count_of(spb.InjectedFault(), 1) == 0
    assert ws.fault_count_of(spb.InjectedFault(count=0), 2) == 0


def test_a_first_event_with_a_status_is_a_refusal() -> None:
    assert ws.refusal_of(spb.SessionEvent(session="s")) is None
    refusal = ws.refusal_of(spb.SessionEvent(status=ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, message="cap"))  # type: ignore[arg-type]
    assert isinstance(refusal, ResourceExhaustedTransient) and refusal.message == "openSession: cap"
