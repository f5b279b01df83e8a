"""Running a model across several devices (one server or several): the runtime's partitioning.

``Partitioner(devices, fallback=cpu)`` plans a model (``partition_plan``: a device per
operation by support, capabilities and preference, the graph cut into steps) and
prepares each step on its device; ``PartitionedModel.execute`` runs the steps in order,
passing the temporaries between them inline (numpy arrays through the client), and
returns the model's outputs. ``execute_async`` runs the same on a worker thread and
delivers the outcome through a Callback exactly once: a step's server dying releases
the waiter with DEAD_OBJECT at once (the step's call fails as a death is detected).

``plan`` is inspectable: ``print(pm.plan)`` lists which operation runs where and why.
Thread-safe as the prepared models are; release with ``release`` or ``with``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from nnhal.client.callbacks import Callback
from nnhal.client.device import Device
from nnhal.client.partition_plan import PartitionPlan, plan_model
from nnhal.client.prepared_model import PreparedModel
from nnhal.client.remote import DEFAULT_CALL_TIMEOUT
from nnhal.core.enums import ErrorStatus, ExecutionPreference, Priority
from nnhal.core.errors import HalError, InvalidArgument
from nnhal.core.types import Model

__all__ = ["PartitionPlan", "PartitionedModel", "Partitioner"]


class PartitionedModel:
    """A model prepared as steps on several devices."""

    def __init__(self, plan: PartitionPlan, prepared: list[PreparedModel]) -> None:
        self.plan = plan
        self._prepared = prepared

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
        for step, pm in zip(self.plan.steps, self._prepared):
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
        for pm in self._prepared:
            pm.release()

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
        return plan_model(model, self.devices, preference, self._fallback)

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
        return PartitionedModel(plan, prepared)
