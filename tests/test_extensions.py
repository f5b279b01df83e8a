"""Vendor extensions (issue #13 item 5): the example extension com.example.nnhal through the
registry in-process, the model rules of extensionNameToPrefix, and across processes: a
device offering it reports it and runs it; a device lacking it answers as the HAL says
(unsupported in getSupportedOperations, INVALID_ARGUMENT at preparation)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, HalVersion, OperandType as T, OperationType, extension_type
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import ExtensionNameAndPrefix, InlinePool, Model, PoolData
from nnhal.server.executor import example_extension, extensions
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.validate import supported_operations, validate_full
from nnhal.testing.local_server import LocalServer

NAME = example_extension.NAME
ENABLED = (NAME,)


def scaled_add_model(prefix_name: str = NAME, operand: int | None = None, alpha: float = 0.5) -> Model:
    """out = a + alpha * b with the extension's SCALED_ADD; ``operand``: the tensors' type
    (default TENSOR_FLOAT32; an extension operand type number uses the extension's)."""
    b = ModelBuilder()
    prefix = b.extension(prefix_name, 7)  # a prefix of the model's own choosing (not the server's 1)
    t = T.TENSOR_FLOAT32 if operand is None else T(extension_type(prefix, operand))
    x = b.input(t, [2, 3])
    y = b.input(t, [2, 3])
    out = b.op(OperationType(extension_type(prefix, example_extension.SCALED_ADD)), [x, y, b.float32(alpha)], t, [2, 3])
    return b.outputs(out).finish()


def _pools(model: Model) -> list[PoolData]:
    return [p.data for p in model.pools if isinstance(p, InlinePool)]


def test_the_example_runs_through_the_registry_in_process() -> None:
    extensions.install(example_extension.DEFINITION)
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    for operand, dtype in ((None, np.float32), (example_extension.TENSOR_FLOAT64, np.float64)):
        model = extensions.localize(scaled_add_model(operand=operand), ENABLED)
        assert supported_operations(model, _pools(model), HalVersion.V1_2) == ([True], [""])
        assert validate_full(model, _pools(model)) == HalVersion.V1_2
        (out,) = PreparedGraph(model, _pools(model)).run([x.astype(dtype), x.astype(dtype)])
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, 1.5 * x)


def test_an_extension_the_device_lacks_is_unsupported_then_invalid() -> None:
    model = extensions.localize(scaled_add_model("com.example.missing"), ENABLED)
    ok, why = supported_operations(model, _pools(model), HalVersion.AIDL_V4)
    assert ok == [False] and "not implemented" in why[0]
    with pytest.raises(InvalidArgument, match="not supported"):
        validate_full(model, _pools(model))
    # Enabled in the process but not by this device: the same answer.
    lacking = extensions.localize(scaled_add_model(), ())
    assert supported_operations(lacking, _pools(lacking), HalVersion.AIDL_V4)[0] == [False]


@pytest.mark.parametrize(
    ("names", "words"),
    [
        ((), "does not map"),
        ((ExtensionNameAndPrefix(NAME, 7), ExtensionNameAndPrefix(NAME, 8)), "listed twice"),
        ((ExtensionNameAndPrefix(NAME, 7), ExtensionNameAndPrefix("com.x.y", 7)), "listed twice"),
        ((ExtensionNameAndPrefix("", 7),), "empty"),
    ],
    ids=["unmapped prefix", "name twice", "prefix twice", "empty name"],
)
def test_extension_name_to_prefix_rules(names: tuple[ExtensionNameAndPrefix, ...], words: str) -> None:
    model = replace(scaled_add_model(), extension_name_to_prefix=names)
    with pytest.raises(InvalidArgument, match=words):
        extensions.localize(model, ENABLED) if names else validate_full(model, _pools(model))


def test_a_device_below_1_2_refuses_extensions() -> None:
    model = extensions.localize(scaled_add_model(), ENABLED)
    with pytest.raises(InvalidArgument, match=r"needs NN HAL 1\.2"):
        supported_operations(model, _pools(model), HalVersion.V1_1)


# -- across processes ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def ext_server() -> Iterator[LocalServer]:
    with LocalServer("--example-extension") as srv:
        yield srv


@pytest.mark.integration
def test_across_processes_with_the_example_extension(ext_server: LocalServer) -> None:
    with Device.connect(ext_server.address, client_name="ext") as dev:
        (ext,) = dev.supported_extensions()
        assert ext.name == NAME
        assert [(t.type, t.is_tensor, t.byte_size) for t in ext.operand_types] == [(0, True, 8)]
        model = scaled_add_model(alpha=2.0)
        assert dev.supported_operations(model) == [True]
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        with dev.prepare_model_sync(model) as pm:
            out = pm.execute([a, np.ones_like(a)])
        np.testing.assert_array_equal(out.outputs[0], a + 2.0)


@pytest.mark.integration
def test_across_processes_on_a_device_without_extensions(device: Device) -> None:
    model = scaled_add_model()
    assert device.supported_extensions() == ()
    ((ok, why),) = device.supported_operations_with_reasons(model)
    assert not ok and "not implemented" in why
    cb = device.prepare_model(model)
    assert cb.wait(30) and cb.status == ErrorStatus.INVALID_ARGUMENT, cb.message
