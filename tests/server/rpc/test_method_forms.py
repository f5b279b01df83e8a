"""The HIDL and AIDL method forms through a real channel: the same owner as the 1.3 forms,
so they take injected faults too (named by their HAL names), and the level gate."""

from __future__ import annotations

import pytest

from nnhal.client.faults import Fault
from nnhal.client.remote import aidl, hidl
from nnhal.core.enums import ErrorStatus, HalVersion
from nnhal.core.errors import GeneralFailure
from tests.server.rpc.conftest import Served, add_request

pytestmark = pytest.mark.timeout(60)


def test_the_hidl_synchronous_form_answers_and_takes_injected_faults(served: Served) -> None:
    r = served.dev.remote
    assert r.run(hidl.execute_sync(r.session_id, served.handle, add_request(), False)).status == ErrorStatus.NONE
    served.dev.inject_faults(Fault.error("executeSynchronously", ErrorStatus.OUTPUT_INSUFFICIENT_SIZE))
    result = r.run(hidl.execute_sync(r.session_id, served.handle, add_request(), False))
    assert result.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE and "injected fault" in result.message
    assert r.run(hidl.execute_sync(r.session_id, served.handle, add_request(), False)).status == ErrorStatus.NONE


def test_a_hidl_query_takes_injected_faults(served: Served) -> None:
    r = served.dev.remote
    served.dev.inject_faults(Fault.error("getCapabilities_1_1", ErrorStatus.GENERAL_FAILURE))
    with pytest.raises(GeneralFailure, match="injected fault"):
        r.run(hidl.capabilities(r.session_id, HalVersion.V1_1))
    assert r.run(hidl.capabilities(r.session_id, HalVersion.V1_1)).operand_performance is not None


def test_the_aidl_synchronous_form_takes_injected_faults(served: Served) -> None:
    r = served.dev.remote
    served.dev.inject_faults(
        Fault.error("AIDL IPreparedModel.executeSynchronously", ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT)
    )
    result, _ = r.run(aidl.execute(r.session_id, served.handle, add_request(), False, None, None, None))
    assert result.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT and "injected fault" in result.message
    again, _ = r.run(aidl.execute(r.session_id, served.handle, add_request(), False, None, None, None))
    assert again.status == ErrorStatus.NONE


def test_an_aidl_form_on_a_12_device_is_refused_by_the_level_gate(served12: Served) -> None:
    r = served12.dev.remote
    result, _ = r.run(aidl.execute(r.session_id, served12.handle, add_request(), False, None, None, None))
    assert result.status == ErrorStatus.GENERAL_FAILURE and "needs NN HAL" in result.message
