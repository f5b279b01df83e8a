"""Running a model across several devices (one server or several): the runtime's partitioning.

``Partitioner(devices, fallback=cpu)`` plans a model (``partition_plan``: a device per
operation by support, capabilities and preference, the graph cut into steps) and
prepares each step on its device; ``PartitionedModel.execute`` runs the steps in order,
passing the temporaries between them, and returns the model's outputs. A temporary the
plan marks as a driver buffer (every step using it on one device) is allocated once at
prepare (IDevice::allocate with the producing step's output role and the consuming
steps' input roles) and named by its token in the steps' requests, so its bytes stay in
the server; the others travel inline (numpy arrays through the client). An allocation
the device refuses turns that temporary inline, and ``plan`` says so and why.
``execute_async`` runs the same on a worker thread and delivers the outcome through a
Callback exactly once: a step's server dying releases the waiter with DEAD_OBJECT at
once (the step's call fails as a death is detected).

The execution, the allocation of the buffers and the settling of the preparations are
calls (:mod:`nnhal.client.steps`) that the asyncio partitioner
(:mod:`nnhal.client.aio.partition`) drives too.

``plan`` is inspectable: ``print(pm.plan)`` lists which operation runs where and why, and
how each temporary travels. Thread-safe: executions of a model holding driver buffers run
one at a time (the buffers are shared), others as concurrently as the prepared models
allow. ``release`` (or ``with``) frees the steps and the buffers.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import numpy as np

from nnhal.client import forms, steps
from nnhal.client.buffer import Buffer
from nnhal.client.callbacks import Callback
from nnhal.client.device import Device
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.partition_plan import PartitionPlan, Temporary, plan_model
from nnhal.client.partition_request import Buffer as TokenBuffer, Run, step_call
from nnhal.client.prepared_model import PreparedModel
from nnhal.client.remote import DEFAULT_CALL_TIMEOUT
from nnhal.core.enums import ErrorStatus, ExecutionPreference, Priority
from nnhal.core.errors import DeadObject, HalError, InvalidArgument
from nnhal.core.types import BufferDesc, BufferRole, Model

__all__ = ["PartitionPlan", "PartitionedModel", "Partitioner", "Temporary"]


@dataclass(frozen=True)
class Allocate:
    """A step of :func:`allocation_call`: ``devices[device].allocate(desc, models, inputs, outputs)``,
    answered by the buffer (its HalError thrown back)."""

    device: int
    models: list[Any]
    input_roles: list[BufferRole]
    output_roles: list[BufferRole]


@dataclass(frozen=True)
class Release:
    """A step: ``obj.release()`` (its HalError thrown back, and dropped)."""

    obj: Any


def execution_call(
    plan: PartitionPlan,
    prepared: Sequence[Any],
    buffers: Mapping[int, TokenBuffer],
    inputs: Sequence[np.ndarray | None],
    timeout: float | None,
) -> Generator[Run, ExecutionOutcome, list[np.ndarray]]:
    """Every step in order, the temporaries passed between them; the model's outputs."""
    main = plan.model.main
    if len(inputs) != len(main.input_indexes):
        raise InvalidArgument(f"the model has {len(main.input_indexes)} inputs, {len(inputs)} given")
    values: dict[int, np.ndarray | None] = dict(zip(main.input_indexes, inputs))
    for step, pm in zip(plan.steps, prepared):
        values.update((yield from step_call(pm, step, main.operands, values, buffers, timeout)))
    outputs = [values[i] for i in main.output_indexes]
    if any(o is None for o in outputs):
        raise InvalidArgument("a model output is an omitted model input")
    return [o for o in outputs if o is not None]


def _released(objects: Sequence[Any]) -> Generator[Release, Any, None]:
    for obj in objects:
        with contextlib.suppress(HalError):
            yield Release(obj)


def settled_call(results: Sequence[Any]) -> Generator[Release, Any, list[Any]]:
    """The prepared models of every step, or (any preparation failed) the first failure
    raised once the others were released."""
    errors = [r for r in results if isinstance(r, BaseException)]
    made = [r for r in results if not isinstance(r, BaseException)]
    if errors:
        yield from _released(made)
        raise errors[0]
    return made


def allocation_call(
    plan: PartitionPlan, prepared: Sequence[Any]
) -> Generator[Allocate | Release, Any, tuple[PartitionPlan, dict[int, Any]]]:
    """A driver-managed buffer per temporary the plan marks so, with the producing step's
    output role and each consuming step's input role. A device refusing one (other than by
    dying) leaves that temporary inline, the plan saying why; DEAD_OBJECT is raised after
    the buffers made so far, and the prepared models, are released."""
    buffers: dict[int, Any] = {}
    temporaries: list[Temporary] = []
    for t in plan.temporaries:
        if not t.driver_buffer:
            temporaries.append(t)
            continue
        producer = plan.steps[t.producer]
        models = [prepared[t.producer], *(prepared[c] for c in t.consumers)]
        out_role = BufferRole(0, producer.outputs.index(t.operand), 1.0)
        in_roles = [BufferRole(k + 1, plan.steps[c].inputs.index(t.operand), 1.0) for k, c in enumerate(t.consumers)]
        try:
            buffers[t.operand] = yield Allocate(producer.device, models, in_roles, [out_role])
        except DeadObject:
            yield from _released([*buffers.values(), *prepared])
            raise
        except HalError as err:
            t = replace(t, driver_buffer=False, why=f"allocate refused ({err.error_status.name}: {err.message})")
        temporaries.append(t)
    return replace(plan, temporaries=tuple(temporaries)), buffers


def release_call(objects: Sequence[Any]) -> Generator[Release, Any, None]:
    """Release every object; the first HalError raised once every one was tried."""
    error: HalError | None = None
    for obj in objects:
        try:
            yield Release(obj)
        except HalError as err:
            error = error or err
    if error is not None:
        raise error


class PartitionedModel:
    """A model prepared as steps on several devices, with the driver buffers of its temporaries."""

    def __init__(
        self, plan: PartitionPlan, prepared: list[PreparedModel], buffers: dict[int, Buffer] | None = None
    ) -> None:
        self.plan = plan
        self._prepared = prepared
        #: Model operand -> its driver-managed buffer.
        self._buffers = buffers or {}
        # Shared buffers: one execution at a time may write and read them.
        self._serial = threading.Lock() if self._buffers else contextlib.nullcontext()

    @property
    def steps(self) -> int:
        return len(self.plan.steps)

    def execute(self, inputs: Sequence[np.ndarray | None], *, timeout: float | None = None) -> list[np.ndarray]:
        """Run every step in order; the model's outputs. Raises the first step's HalError
        (DEAD_OBJECT when a step's server is gone)."""
        with self._serial:
            call = execution_call(self.plan, self._prepared, self._buffers, inputs, timeout)
            return steps.drive(call, _run)

    def execute_async(
        self, inputs: Sequence[np.ndarray], *, timeout: float | None = None
    ) -> Callback[list[np.ndarray]]:
        """``execute`` on a worker thread; the callback gets the outputs or the error, once."""
        cb: Callback[list[np.ndarray]] = Callback()

        def work() -> None:
            try:
                cb.notify(ErrorStatus.NONE, self.execute(inputs, timeout=timeout))
            except HalError as err:
                cb.notify(err.error_status, None, err.message)
            except Exception as err:  # a bug must still release the waiter
                cb.notify(ErrorStatus.GENERAL_FAILURE, None, f"partitioned execution failed: {err!r}")

        threading.Thread(target=work, name="nnhal-partition", daemon=True).start()
        return cb

    def release(self) -> None:
        """Free the buffers, then the steps (idempotent); raises the first HalError (DEAD_OBJECT
        for a dead server, whose session freed its objects anyway) once every one was tried."""
        steps.drive(release_call([*self._buffers.values(), *self._prepared]), _release)

    def __enter__(self) -> PartitionedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


D = TypeVar("D", bound=forms.Leveled)


class Devices(Generic[D]):
    """The devices a partitioner of either client plans across: ``devices`` (connected
    proxies, on one server or several) and ``fallback`` (one of them, usually the CPU
    reference) that runs what no device supports."""

    def __init__(self, devices: Sequence[D], fallback: D | None = None) -> None:
        if not devices:
            raise InvalidArgument("a partitioner needs at least one device")
        self.devices = list(devices)
        if fallback is not None and fallback not in self.devices:
            self.devices.append(fallback)
        self._fallback = None if fallback is None else self.devices.index(fallback)

    def memory_domains(self) -> list[bool]:
        """Per device, whether it allocates driver buffers: IDevice::allocate exists from HAL
        1.3 on (every AIDL level keeps it)."""
        return [forms.modern(d) for d in self.devices]


class Partitioner(Devices[Device]):
    """Plans and prepares models across ``devices`` (:class:`Devices`)."""

    def plan(
        self, model: Model, preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER
    ) -> PartitionPlan:
        return plan_model(model, self.devices, preference, self._fallback, self.memory_domains())

    def prepare(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        timeout: float | None = None,
    ) -> PartitionedModel:
        """Plan, then prepare every step on its device (all launched, then awaited).
        Raises the first preparation's HalError (the others are released)."""
        plan = self.plan(model, preference)
        callbacks = [
            self.devices[s.device].prepare_model(s.model, preference=preference, priority=priority, timeout=timeout)
            for s in plan.steps
        ]
        results: list[PreparedModel | HalError] = []
        for cb in callbacks:
            try:
                results.append(cb.get(timeout or DEFAULT_CALL_TIMEOUT))
            except HalError as err:
                results.append(err)
        prepared = steps.drive(settled_call(results), _release)
        devices = self.devices

        def perform(step: Allocate | Release) -> Any:
            if isinstance(step, Release):
                return _release(step)
            return devices[step.device].allocate(BufferDesc(), step.models, step.input_roles, step.output_roles)

        plan, buffers = steps.drive(allocation_call(plan, prepared), perform)
        return PartitionedModel(plan, prepared, buffers)


def _run(run: Run) -> ExecutionOutcome:
    return run.prepared.execute_request(run.request, timeout=run.timeout)  # type: ignore[no-any-return]


def _release(step: Release) -> None:
    step.obj.release()
