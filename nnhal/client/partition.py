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

``plan`` is inspectable: ``print(pm.plan)`` lists which operation runs where and why, and
how each temporary travels. Thread-safe: executions of a model holding driver buffers run
one at a time (the buffers are shared), others as concurrently as the prepared models
allow. ``release`` (or ``with``) frees the steps and the buffers.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from nnhal.client import forms
from nnhal.client.buffer import Buffer
from nnhal.client.callbacks import Callback
from nnhal.client.device import Device
from nnhal.client.partition_plan import PartitionPlan, Temporary, plan_model
from nnhal.client.partition_request import run_step
from nnhal.client.prepared_model import PreparedModel
from nnhal.client.remote import DEFAULT_CALL_TIMEOUT
from nnhal.core.enums import ErrorStatus, ExecutionPreference, Priority
from nnhal.core.errors import DeadObject, HalError, InvalidArgument
from nnhal.core.types import BufferDesc, BufferRole, Model

__all__ = ["PartitionPlan", "PartitionedModel", "Partitioner", "Temporary"]


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
        main = self.plan.model.main
        if len(inputs) != len(main.input_indexes):
            raise InvalidArgument(f"the model has {len(main.input_indexes)} inputs, {len(inputs)} given")
        values: dict[int, np.ndarray | None] = dict(zip(main.input_indexes, inputs))
        with self._serial:
            for step, pm in zip(self.plan.steps, self._prepared):
                if any(o in self._buffers for o in (*step.inputs, *step.outputs)):
                    values.update(run_step(pm, step, main.operands, values, self._buffers, timeout))
                else:
                    outcome = pm.execute([values[i] for i in step.inputs], timeout=timeout)
                    values.update(zip(step.outputs, outcome.outputs))
        outputs = [values[i] for i in main.output_indexes]
        if any(o is None for o in outputs):
            raise InvalidArgument("a model output is an omitted model input")
        return [o for o in outputs if o is not None]

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
        error: HalError | None = None
        objects: list[Buffer | PreparedModel] = [*self._buffers.values(), *self._prepared]
        for obj in objects:
            try:
                obj.release()
            except HalError as err:
                error = error or err
        if error is not None:
            raise error

    def __enter__(self) -> PartitionedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Partitioner:
    """Plans and prepares models across ``devices`` (connected proxies, on one server or
    several); ``fallback`` (one of them, usually the CPU reference) runs what no device supports."""

    def __init__(self, devices: Sequence[Device], fallback: Device | None = None) -> None:
        if not devices:
            raise InvalidArgument("a partitioner needs at least one device")
        self.devices = list(devices)
        if fallback is not None and fallback not in self.devices:
            self.devices.append(fallback)
        self._fallback = None if fallback is None else self.devices.index(fallback)

    def plan(
        self, model: Model, preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER
    ) -> PartitionPlan:
        # IDevice::allocate exists from HAL 1.3 on (every AIDL level keeps it).
        domains = [forms.modern(d.remote) for d in self.devices]
        return plan_model(model, self.devices, preference, self._fallback, domains)

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
        prepared: list[PreparedModel] = []
        error: HalError | None = None
        for cb in callbacks:
            try:
                prepared.append(cb.get(timeout or DEFAULT_CALL_TIMEOUT))
            except HalError as err:
                error = error or err
        if error is not None:
            for pm in prepared:
                pm.release()
            raise error
        try:
            plan, buffers = _allocate(plan, self.devices, prepared)
        except HalError:
            for pm in prepared:
                with contextlib.suppress(HalError):
                    pm.release()
            raise
        return PartitionedModel(plan, prepared, buffers)


def _allocate(
    plan: PartitionPlan, devices: Sequence[Device], prepared: Sequence[PreparedModel]
) -> tuple[PartitionPlan, dict[int, Buffer]]:
    """A driver-managed buffer per temporary the plan marks so, with the producing step's
    output role and each consuming step's input role. A device refusing one (other than by
    dying) leaves that temporary inline, the plan saying why; DEAD_OBJECT is raised (after
    the buffers made so far are freed)."""
    buffers: dict[int, Buffer] = {}
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
            buffers[t.operand] = devices[producer.device].allocate(BufferDesc(), models, in_roles, [out_role])
        except DeadObject:
            for b in buffers.values():
                with contextlib.suppress(HalError):
                    b.release()
            raise
        except HalError as err:
            t = replace(t, driver_buffer=False, why=f"allocate refused ({err.error_status.name}: {err.message})")
        temporaries.append(t)
    return replace(plan, temporaries=tuple(temporaries)), buffers
