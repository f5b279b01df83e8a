"""The one fault description: the constructors' checks, the names of gRPC codes, the log line
and the injected error."""

from __future__ import annotations

import grpc
import pytest

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.faults import GRPC_CODE_NAMES, GRPC_CODES, Fault


def test_the_grpc_code_names_are_grpcs_own_numbers() -> None:
    grpcs = {code.name: code.value[0] for code in grpc.StatusCode if code is not grpc.StatusCode.OK}
    assert grpcs == GRPC_CODES
    assert all(GRPC_CODE_NAMES[number] == name for name, number in GRPC_CODES.items())


def test_an_abort_names_a_known_grpc_code() -> None:
    assert Fault.abort("execute_1_3", after=1, code="INTERNAL").grpc_code == 13
    with pytest.raises(ValueError, match="NOPE"):
        Fault.abort("execute_1_3", code="NOPE")


@pytest.mark.parametrize(
    ("fault", "line"),
    [
        (Fault.error("allocate", ErrorStatus.DEVICE_UNAVAILABLE), "error (DEVICE_UNAVAILABLE) on allocate"),
        (Fault.abort("execute_1_3", after=1), "abort (UNAVAILABLE after 1 message(s)) on execute_1_3"),
        (Fault.stall("execute_1_3", ms=5), "stall (5 ms) on execute_1_3"),
        (Fault.exit("getType", point="before_reply", code=3), "exit (status 3 at before_reply) on getType"),
    ],
)
def test_describe_says_what_the_fault_does(fault: Fault, line: str) -> None:
    assert fault.describe() == line


def test_an_error_fault_answers_its_status_saying_it_was_injected() -> None:
    err = Fault.error("allocate", ErrorStatus.DEVICE_UNAVAILABLE, message="as in my test").hal_error()
    assert isinstance(err, HalError) and err.error_status == ErrorStatus.DEVICE_UNAVAILABLE
    assert err.message == "injected fault: DEVICE_UNAVAILABLE on allocate (setFaults): as in my test"
    assert Fault.abort("execute_1_3").abort_details() == "injected fault: execute_1_3 aborted (UNAVAILABLE)"
