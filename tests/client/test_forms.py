"""The client's choice of method forms and the AIDL values it sends, without a server.

The method table (which level serves which form), the HIDL form for each level, the
versioned wire round trip of a 1.0 model and request, AIDL Timing and durations,
hint validation, (the burst's record of what the device caches: ``test_aidl_burst.py``).
"""

from __future__ import annotations

import dataclasses

import pytest

from nnhal.client.remote.hidl import form_version, to_version
from nnhal.core import versions, wire_hidl
from nnhal.core.aidl_types import (
    TimingNs,
    TokenValuePair,
    accepted_hints,
    loop_timeout_for_driver,
    optional_duration,
)
from nnhal.core.enums import LOOP_TIMEOUT_MAXIMUM_NS, ErrorStatus, HalVersion
from nnhal.core.errors import GeneralFailure, InvalidArgument
from nnhal.core.methods import METHOD_LEVEL, require_method, serves
from nnhal.core.types import ExtensionNameAndPrefix, Timing
from nnhal.proto import hidl_pb2 as hpb
from tests.conftest import add_model, one_io_request, ones

V = HalVersion


def test_method_levels() -> None:
    assert serves(V.V1_0, "prepareModel") and not serves(V.V1_0, "prepareModel_1_1")
    assert serves(V.V1_3, "execute") and serves(V.AIDL_V1, "executeFenced")
    assert not serves(V.AIDL_V3, "createReusableExecution") and serves(V.AIDL_V4, "createReusableExecution")
    with pytest.raises(GeneralFailure, match=r"prepareModel_1_3 needs NN HAL 1\.3; this device serves 1\.0"):
        require_method(V.V1_0, "prepareModel_1_3")
    assert METHOD_LEVEL["IBurst.releaseMemoryResource"] == V.AIDL_V1


@pytest.mark.parametrize(("level", "form"), [(10, V.V1_0), (11, V.V1_1), (12, V.V1_2)])
def test_form_version(level: int, form: HalVersion) -> None:
    assert form_version(level) == form


def test_a_1_0_model_and_request_round_trip_through_their_wire_types() -> None:
    model = add_model()
    v10 = versions.convert(model, to=V.V1_0)
    back = wire_hidl.model_from(wire_hidl.model_to(v10))
    assert back == v10 and versions.to_canonical(back) == model
    request = versions.convert(one_io_request(ones()), to=V.V1_0)
    assert wire_hidl.request_from(wire_hidl.request_to(request, hpb.RequestV1_0())) == request


def test_newer_content_is_invalid_argument_in_an_older_form() -> None:
    relaxed = dataclasses.replace(add_model(), relax_computation_float32_to_float16=True)
    with pytest.raises(InvalidArgument, match=r"prepareModel: relaxComputationFloat32toFloat16 need NN HAL 1\.1"):
        to_version(relaxed, V.V1_0, "prepareModel")


def test_status_codes_a_version_lacks_become_general_failure() -> None:
    assert wire_hidl.status_for(ErrorStatus.MISSED_DEADLINE_TRANSIENT, V.V1_0) == ErrorStatus.GENERAL_FAILURE
    assert wire_hidl.status_for(ErrorStatus.INVALID_ARGUMENT, V.V1_2) == ErrorStatus.INVALID_ARGUMENT


def test_aidl_timing_is_nanoseconds_with_minus_one() -> None:
    assert TimingNs.of(Timing()) == TimingNs(-1, -1)
    assert TimingNs.of(Timing(5, 7)) == TimingNs(5000, 7000)
    assert TimingNs(5000, -1).canonical() == Timing(5, Timing().time_in_driver)


def test_optional_durations() -> None:
    assert optional_duration(None, "d") is None and optional_duration(-1, "d") is None
    assert optional_duration(0, "d") == 0
    with pytest.raises(InvalidArgument, match="-1 to omit"):
        optional_duration(-2, "d")
    assert loop_timeout_for_driver(None) == 0  # the driver's default
    assert loop_timeout_for_driver(0) == 1  # no time at all, not the default
    assert loop_timeout_for_driver(10**12) == LOOP_TIMEOUT_MAXIMUM_NS


def test_hints() -> None:
    ext = (ExtensionNameAndPrefix("vendor.a", 1), ExtensionNameAndPrefix("vendor.b", 2))
    a, b, base = TokenValuePair((1 << 16) | 5), TokenValuePair((2 << 16) | 5), TokenValuePair(9)
    assert accepted_hints((a, b, base), ext, {"vendor.a"}, "hints") == (a,)
    with pytest.raises(InvalidArgument, match="twice"):
        accepted_hints((a, a), ext, {"vendor.a"}, "hints")
    with pytest.raises(InvalidArgument, match="sign bit"):
        accepted_hints((TokenValuePair(-7),), (), (), "hints")
    with pytest.raises(InvalidArgument, match="twice"):
        accepted_hints((), (*ext, ExtensionNameAndPrefix("vendor.a", 3)), (), "hints")
