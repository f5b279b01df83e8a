"""The asyncio partitioner: a model run across several devices from an event loop.

The asyncio twin of :mod:`nnhal.client.partition`, driving its calls — the plan
(``partition_plan``, from the devices' capabilities and supported operations, awaited
first), the settling of the preparations, the allocation of the driver buffers and the
steps' execution (:func:`~nnhal.client.partition.execution_call`) — with awaited
``aio`` proxies. ``await Partitioner(devices, fallback=cpu).prepare(model)`` gives an
:class:`AioPartitionedModel`; ``await pm.execute(inputs)`` the model's outputs (raising the
first step's HalError, DEAD_OBJECT at once when a step's server dies), ``execute_async``
the same as a task. Executions of a model holding driver buffers run one at a time (an
``asyncio.Lock``). Release with ``await release()`` or ``async with``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnhal.client import steps
from nnhal.client.aio.buffer import Buffer
from nnhal.client.aio.device import Device
from nnhal.client.aio.prepared_model import PreparedModel
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.partition import (
    Allocate,
    Devices,
    Release,
    allocation_call,
    execution_call,
    release_call,
    settled_call,
)
from nnhal.client.partition_plan import PartitionPlan, plan_model
from nnhal.client.partition_request import Run
from nnhal.client.release import AsyncReleasable
from nnhal.core.enums import ExecutionPreference, Priority
from nnhal.core.types import BufferDesc, Capabilities, Model

__all__ = ["AioPartitionedModel", "Partitioner"]


@dataclass(frozen=True)
class _Facts:
    """What planning asks of a device, fetched beforehand (the plan is computed without I/O)."""

    name: str
    caps: Capabilities
    support: list[tuple[bool, str]]

    def capabilities(self) -> Capabilities:
        return self.caps

    def supported_operations_with_reasons(self, model: Model) -> list[tuple[bool, str]]:
        return self.support


async def _run(run: Run) -> ExecutionOutcome:
    return await run.prepared.execute_request(run.request, timeout=run.timeout)  # type: ignore[no-any-return]


async def _release(step: Release) -> None:
    await step.obj.release()


class AioPartitionedModel(AsyncReleasable):
    """A model prepared as steps on several devices (asyncio)."""

    def __init__(self, plan: PartitionPlan, prepared: list[PreparedModel], buffers: dict[int, Buffer]) -> None:
        self.plan = plan
        self._prepared = prepared
        self._buffers = buffers
        # Shared buffers: one execution at a time may write and read them.
        self._serial: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if buffers else contextlib.nullcontext()
        )

    async def execute(self, inputs: Sequence[np.ndarray | None], *, timeout: float | None = None) -> list[np.ndarray]:
        """Run every step in order; the model's outputs. Raises the first step's HalError."""
        async with self._serial:
            call = execution_call(self.plan, self._prepared, self._buffers, inputs, timeout)
            return await steps.drive_async(call, _run)

    def execute_async(
        self, inputs: Sequence[np.ndarray | None], *, timeout: float | None = None
    ) -> asyncio.Task[list[np.ndarray]]:
        """``execute`` started at once as a task (from a running event loop)."""
        return asyncio.get_running_loop().create_task(self.execute(inputs, timeout=timeout), name="nnhal-partition")

    async def release(self) -> None:
        """Free the buffers, then the steps; raises the first HalError once every one was tried."""
        objects, self._buffers, self._prepared = [*self._buffers.values(), *self._prepared], {}, []
        await steps.drive_async(release_call(objects), _release)


class Partitioner(Devices[Device]):
    """Plans and prepares models across asyncio ``devices`` (:class:`~nnhal.client.partition.Devices`)."""

    async def plan(
        self, model: Model, preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER
    ) -> PartitionPlan:
        facts = [
            _Facts(d.name, await d.capabilities(), await d.supported_operations_with_reasons(model))
            for d in self.devices
        ]
        return plan_model(model, facts, preference, self._fallback, self.memory_domains())

    async def prepare(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        timeout: float | None = None,
    ) -> AioPartitionedModel:
        """Plan, then prepare every step on its device (concurrently). Raises the first
        preparation's HalError (the others are released)."""
        plan = await self.plan(model, preference)
        results = await asyncio.gather(
            *(
                self.devices[s.device].prepare_model(s.model, preference=preference, priority=priority, timeout=timeout)
                for s in plan.steps
            ),
            return_exceptions=True,
        )
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, Exception):
                raise r  # a cancellation
        prepared = await steps.drive_async(settled_call(results), _release)
        devices = self.devices

        async def perform(step: Allocate | Release) -> Any:
            if isinstance(step, Release):
                return await _release(step)
            return await devices[step.device].allocate(BufferDesc(), step.models, step.input_roles, step.output_roles)

        plan, buffers = await steps.drive_async(allocation_call(plan, prepared), perform)
        return AioPartitionedModel(plan, prepared, buffers)
