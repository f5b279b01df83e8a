"""The method-form table: each form's level, which levels serve it, and the two refusals."""

from __future__ import annotations

import pytest

from nnhal.core.enums import HalVersion
from nnhal.core.errors import GeneralFailure, InvalidArgument
from nnhal.core.methods import METHOD_LEVEL, method_level, require_field, require_method, serves


def test_a_level_serves_its_forms_and_every_older_one() -> None:
    assert method_level("prepareModel") == HalVersion.V1_0 and method_level("executeFenced") == HalVersion.V1_3
    for form, level in METHOD_LEVEL.items():
        assert serves(level, form) and serves(HalVersion.AIDL_V4, form)
        assert level == HalVersion.V1_0 or not serves(HalVersion.V1_0, form)


def test_a_missing_method_is_general_failure_and_a_newer_field_invalid_argument() -> None:
    with pytest.raises(GeneralFailure, match=r"executeFenced needs NN HAL 1\.3; this device serves 1\.2"):
        require_method(HalVersion.V1_2, "executeFenced")
    require_method(HalVersion.V1_3, "executeFenced")
    with pytest.raises(InvalidArgument, match=r"execute_1_2: a deadline needs NN HAL 1\.3"):
        require_field(HalVersion.V1_2, HalVersion.V1_3, "a deadline", "execute_1_2")
    with pytest.raises(KeyError):
        method_level("noSuchMethod")
