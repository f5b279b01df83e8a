"""The client's fault scope (``nnhal.client.faults``): calls in a ``fault_scope`` carry its
label with a nonce fresh for each run of the scope; scopes nest (the innermost wins), end
with their block, and follow the tasks started inside them."""

from __future__ import annotations

import asyncio

from nnhal.client.faults import Fault, current_fault_scope, fault_scope
from nnhal.core import fault_scope as codec, faults as core_faults


def _label(value: str | None) -> str:
    assert value is not None
    decoded = codec.decode(value)
    assert decoded is not None
    return decoded[1]


def test_a_scope_names_its_label_with_a_fresh_nonce_each_run() -> None:
    assert current_fault_scope() is None
    with fault_scope("case/1"):
        first = current_fault_scope()
    with fault_scope("case/1"):
        second = current_fault_scope()
    assert _label(first) == _label(second) == "case/1"
    assert first != second  # a new run of the same work counts its calls from 0 again
    assert current_fault_scope() is None


def test_scopes_nest_and_the_innermost_wins() -> None:
    with fault_scope("outer"):
        outer = current_fault_scope()
        with fault_scope("inner"):
            assert _label(current_fault_scope()) == "inner"
        assert current_fault_scope() == outer
    assert current_fault_scope() is None


def test_a_task_started_in_a_scope_carries_it() -> None:
    async def inside() -> str | None:
        return current_fault_scope()

    async def main() -> None:
        with fault_scope("task-scope"):
            expected = current_fault_scope()
            task = asyncio.get_running_loop().create_task(inside())
        assert await task == expected  # the task copied the context it was started in
        assert await inside() is None

    asyncio.run(main())


def test_the_client_fault_is_the_cores_one_description() -> None:
    assert Fault is core_faults.Fault
