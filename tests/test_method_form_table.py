"""Every NN HAL method form × {sync client, asyncio client}: which test exercises it across
processes. The rows come from ``nnhal.core.methods`` (no form can be left out), each test
named must exist, and ``docs/method-forms.md`` is this table rendered (run with
``NNHAL_WRITE_TABLE=1`` to rewrite it after a change)."""

from __future__ import annotations

import ast
import os
from functools import cache
from pathlib import Path

from nnhal.core.methods import METHOD_LEVEL

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "method-forms.md"

FORMS = "tests/integration/test_method_forms.py"
DEVICE = "tests/integration/test_device.py"
DOMAINS = "tests/integration/test_memory_domains.py"
AIDL = "tests/integration/test_aidl_surface.py"
MODES = "tests/integration/test_conformance_modes.py"
AIO = "tests/integration/test_aio_client.py"

V1_0 = f"{FORMS}::test_the_1_0_methods_work_across_processes"
V1_1 = f"{FORMS}::test_a_1_1_device_speaks_its_own_forms"
V1_2 = f"{FORMS}::test_a_1_2_device_speaks_its_own_forms"
LEVEL_8 = f"{MODES}::test_every_executor_mode_passes_at_level_8"
AIO_BASICS = f"{AIO}::test_prepare_and_execute_sync_and_async"
AIO_BUFFERS = f"{AIO}::test_driver_managed_buffers"
AIO_BURST = f"{AIO}::test_a_burst_answers_as_executions_do_and_a_cancelled_one_ends_only_itself"
CACHE = f"{DEVICE}::test_compilation_cache_roundtrip_and_tamper"
AIO_FORMS = "tests/client/aio/test_forms.py"
AIO_AIDL = "tests/client/aio/test_aidl.py"
AIO_1_0 = f"{AIO_FORMS}::test_the_1_0_methods_work_across_processes"
AIO_1_1 = f"{AIO_FORMS}::test_a_1_1_device_speaks_its_own_forms"
AIO_1_2 = f"{AIO_FORMS}::test_a_1_2_device_speaks_its_own_forms"
AIO_FENCED = f"{AIO_FORMS}::test_fenced_executions_chain"
AIO_EXEC = f"{AIO_AIDL}::test_the_aidl_execution_forms"
AIO_REUSE = f"{AIO_AIDL}::test_a_reusable_execution_runs_many_times"
AIO_IBURST = f"{AIO_AIDL}::test_an_aidl_burst_sends_a_tokens_memory_once"
AIO_CONFIG = f"{AIO_AIDL}::test_prepare_with_config_and_the_aidl_allocate"

#: form -> (the sync client's test, the asyncio client's test).
EXERCISED: dict[str, tuple[str, str]] = {
    "getCapabilities": (V1_0, AIO_1_0),
    "getSupportedOperations": (V1_0, AIO_1_0),
    "prepareModel": (V1_0, AIO_1_0),
    "getStatus": (V1_0, AIO_BASICS),
    "execute": (V1_0, AIO_1_0),
    "getCapabilities_1_1": (V1_1, AIO_1_1),
    "getSupportedOperations_1_1": (V1_1, AIO_1_1),
    "prepareModel_1_1": (V1_1, AIO_1_1),
    "getCapabilities_1_2": (V1_2, AIO_1_2),
    "getSupportedOperations_1_2": (V1_2, AIO_1_2),
    "prepareModel_1_2": (V1_2, AIO_1_2),
    "prepareModelFromCache": (V1_2, AIO_1_2),
    "getVersionString": (V1_2, AIO_BASICS),
    "getType": (V1_2, AIO_BASICS),
    "getSupportedExtensions": (V1_2, AIO_BASICS),
    "getNumberOfCacheFilesNeeded": (V1_2, AIO_BASICS),
    "execute_1_2": (V1_2, AIO_1_2),
    "executeSynchronously": (V1_2, AIO_1_2),
    "configureExecutionBurst": (
        V1_2,
        f"{AIO}::test_a_burst_answers_as_executions_do_and_a_cancelled_one_ends_only_itself",
    ),
    "getCapabilities_1_3": (f"{DEVICE}::test_static_device_facts", AIO_BASICS),
    "getSupportedOperations_1_3": (f"{DEVICE}::test_supported_operations_reports_reasons", AIO_BASICS),
    "prepareModel_1_3": (f"{DEVICE}::test_prepare_and_execute_sync_async", AIO_BASICS),
    "prepareModelFromCache_1_3": (
        f"{DEVICE}::test_compilation_cache_roundtrip_and_tamper",
        f"{AIO}::test_prepare_from_cache",
    ),
    "allocate": (f"{DOMAINS}::test_copy_round_trip_inline_and_shared", AIO_BUFFERS),
    "execute_1_3": (f"{DEVICE}::test_prepare_and_execute_sync_async", AIO_BASICS),
    "executeSynchronously_1_3": (f"{DEVICE}::test_prepare_and_execute_sync_async", AIO_BASICS),
    "executeFenced": (f"{DEVICE}::test_fenced_execution_chain_and_burst", AIO_FENCED),
    "IBuffer.copyTo": (f"{DOMAINS}::test_copy_round_trip_inline_and_shared", AIO_BUFFERS),
    "IBuffer.copyFrom": (f"{DOMAINS}::test_copy_round_trip_inline_and_shared", AIO_BUFFERS),
    "IFencedExecutionCallback.getExecutionInfo": (f"{DEVICE}::test_fenced_execution_chain_and_burst", AIO_FENCED),
    "AIDL IDevice.allocate": (f"{AIDL}::test_fenced_with_config_and_buffer_role_probability", AIO_CONFIG),
    "AIDL IPreparedModel.executeSynchronously": (LEVEL_8, AIO_EXEC),
    "AIDL IPreparedModel.executeFenced": (LEVEL_8, AIO_EXEC),
    "AIDL IPreparedModel.configureExecutionBurst": (f"{AIDL}::test_a_burst_reuses_a_memory_token", AIO_IBURST),
    "AIDL IFencedExecutionCallback.getExecutionInfo": (LEVEL_8, AIO_EXEC),
    "IBurst.executeSynchronously": (f"{AIDL}::test_a_burst_reuses_a_memory_token", AIO_IBURST),
    "IBurst.releaseMemoryResource": (f"{AIDL}::test_a_burst_reuses_a_memory_token", AIO_IBURST),
    "prepareModelWithConfig": (LEVEL_8, AIO_CONFIG),
    "createReusableExecution": (f"{AIDL}::test_a_reusable_execution_runs_many_times_with_one_request", AIO_REUSE),
    "executeSynchronouslyWithConfig": (LEVEL_8, AIO_EXEC),
    "executeFencedWithConfig": (f"{AIDL}::test_fenced_with_config_and_buffer_role_probability", AIO_EXEC),
    "IBurst.executeSynchronouslyWithConfig": (LEVEL_8, AIO_IBURST),
    "IExecution.executeSynchronously": (
        f"{AIDL}::test_a_reusable_execution_runs_many_times_with_one_request",
        AIO_REUSE,
    ),
    "IExecution.executeFenced": (LEVEL_8, AIO_REUSE),
}


@cache
def _tests_of(path: str) -> frozenset[str]:
    tree = ast.parse((ROOT / path).read_text())
    return frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_"))


def _render() -> str:
    lines = [
        "# Method forms × clients",
        "",
        "Every NN HAL method form (`nnhal/core/methods.py`) and the test that exercises it across",
        "processes with each client. Generated by `tests/test_method_form_table.py`. Both clients",
        "pick the form of the device's level and build its messages in the same code",
        "(`nnhal/client/forms.py`, `nnhal/client/remote/calls.py`, `hidl.py`, `aidl.py`).",
        "",
        "| form | level | sync client | asyncio client |",
        "|---|---|---|---|",
    ]
    for form, level in METHOD_LEVEL.items():
        sync, aio = EXERCISED[form]
        lines.append(f"| `{form}` | {level.label} | ✓ `{sync}` | ✓ `{aio}` |")
    return "\n".join(lines) + "\n"


def test_every_form_has_a_row_and_every_named_test_exists() -> None:
    assert set(EXERCISED) == set(METHOD_LEVEL)
    for form, (sync, aio) in EXERCISED.items():
        for ref in (sync, aio):
            path, name = ref.split("::")
            assert name in _tests_of(path), (form, ref)


def test_the_rendered_table_is_current() -> None:
    text = _render()
    if os.environ.get("NNHAL_WRITE_TABLE"):
        TABLE.write_text(text)
    assert TABLE.exists() and TABLE.read_text() == text, "run with NNHAL_WRITE_TABLE=1 to rewrite docs/method-forms.md"
