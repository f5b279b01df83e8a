"""Partitioning a model across devices, as the NNAPI runtime's ExecutionPlan does: the plan.

``plan_model`` asks every device which operations it supports (with the reason when
not), picks a device per operation, cuts the graph into steps and builds each step's
sub-model:

- **Choice.** Among the devices supporting an operation, the one whose capabilities
  give the lowest execution time (``LOW_POWER``: power usage) for the operation's
  first input type (the relaxed figures for a relaxed float32 model); ties keep the
  earlier device. No device supporting it: the ``fallback`` device (the CPU reference),
  else INVALID_ARGUMENT naming the operation and every device's reason.
- **Steps.** Kahn's topological order, taking ready operations of the current device
  for as long as there are any (as the runtime's per-device queues do), so a step is
  as long as the graph allows; then the device of the next ready operation.
- **Sub-models.** A step's inputs are the model inputs and other steps' results it
  reads; its outputs are the model outputs and the results later steps read. Constants
  stay constants (pools are shared by reference), control-flow subgraphs come along.
- **Temporaries.** A result one step writes and later steps read is a driver-managed
  buffer (IDevice::allocate on the steps' device, so its bytes never leave the server)
  when every step touching it runs on one device that has memory domains (HAL 1.3 and
  later) and its shape is fully known at plan time; otherwise it travels inline through
  the client: a model output or a result read on another device must reach the client
  anyway (one round trip, not a buffer plus a copy), and a buffer needs its size up
  front. As the runtime does, the decision covers every role of the temporary at once.

The plan is data: ``PartitionPlan.rows()`` says which operation runs where and why,
``PartitionPlan.temporaries`` how each temporary travels and why, ``str(plan)`` prints both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from nnhal.core import subgraphs
from nnhal.core.enums import ExecutionPreference, OperandLifeTime, OperandType
from nnhal.core.errors import InvalidArgument
from nnhal.core.operand_types import INFO
from nnhal.core.subgraphs import step_model
from nnhal.core.types import Capabilities, Model, Operand, PerformanceInfo

L = OperandLifeTime


class PlanDevice(Protocol):
    """What planning needs of a device (``nnhal.client.device.Device`` is one)."""

    @property
    def name(self) -> str: ...

    def capabilities(self) -> Capabilities: ...

    def supported_operations_with_reasons(self, model: Model) -> list[tuple[bool, str]]: ...


@dataclass(frozen=True)
class Choice:
    operation: int
    device: int  # index into the plan's devices
    why: str


@dataclass(frozen=True)
class Step:
    device: int
    operations: tuple[int, ...]  # indexes into the model's main operations
    inputs: tuple[int, ...]  # model operands the step reads from outside
    outputs: tuple[int, ...]  # model operands the step writes for others
    model: Model


@dataclass(frozen=True)
class Temporary:
    """A result one step writes and later steps read."""

    operand: int  # index into the model's main operands
    producer: int  # the step writing it
    consumers: tuple[int, ...]  # the later steps reading it
    driver_buffer: bool  # True: a driver-managed buffer on the producer's device; False: inline
    why: str

    @property
    def kind(self) -> str:
        return "driver buffer" if self.driver_buffer else "inline"


@dataclass(frozen=True)
class PartitionPlan:
    model: Model
    device_names: tuple[str, ...]
    choices: tuple[Choice, ...]
    steps: tuple[Step, ...]
    temporaries: tuple[Temporary, ...] = ()

    def temporary(self, operand: int) -> Temporary:
        """The temporary of model operand ``operand`` (KeyError when none is)."""
        for t in self.temporaries:
            if t.operand == operand:
                return t
        raise KeyError(operand)

    def driver_buffers(self) -> tuple[Temporary, ...]:
        return tuple(t for t in self.temporaries if t.driver_buffer)

    def rows(self) -> list[tuple[int, str, str, int, str]]:
        """(operation, its type, device, step, why) per operation."""
        step_of = {op: k for k, s in enumerate(self.steps) for op in s.operations}
        ops = self.model.main.operations
        return [
            (c.operation, ops[c.operation].type.name, self.device_names[c.device], step_of[c.operation], c.why)
            for c in self.choices
        ]

    def operations_per_device(self) -> dict[str, int]:
        counts = dict.fromkeys(self.device_names, 0)
        for c in self.choices:
            counts[self.device_names[c.device]] += 1
        return counts

    def __str__(self) -> str:
        lines = [f"{len(self.steps)} step(s) on {', '.join(self.device_names)}"]
        for op, kind, device, step, why in self.rows():
            lines.append(f"  op {op:3d} {kind:<28} step {step} on {device}: {why}")
        for t in self.temporaries:
            to = ", ".join(str(c) for c in t.consumers)
            lines.append(f"  operand {t.operand:3d} step {t.producer} -> step {to}: {t.kind} ({t.why})")
        return "\n".join(lines)


def _perf(caps: Capabilities, t: OperandType, relaxed: bool, preference: ExecutionPreference) -> float:
    info: PerformanceInfo | None = caps.relaxed_float32_to_float16_performance_tensor
    if not (relaxed and t == OperandType.TENSOR_FLOAT32):
        info = next((p.info for p in caps.operand_performance if p.type == t), None)
    if info is None:
        return float("inf")
    return info.power_usage if preference == ExecutionPreference.LOW_POWER else info.exec_time


def choose(
    model: Model,
    devices: Sequence[PlanDevice],
    preference: ExecutionPreference,
    fallback: int | None,
) -> tuple[Choice, ...]:
    support = [d.supported_operations_with_reasons(model) for d in devices]
    caps = [d.capabilities() for d in devices]
    names = [d.name for d in devices]
    main = model.main
    relaxed = model.relax_computation_float32_to_float16
    measure = "power" if preference == ExecutionPreference.LOW_POWER else "time"
    choices = []
    for k, op in enumerate(main.operations):
        t = main.operands[op.inputs[0]].type if op.inputs else OperandType.TENSOR_FLOAT32
        able = [i for i in range(len(devices)) if support[i][k][0]]
        if not able:
            reasons = "; ".join(f"{names[i]}: {support[i][k][1] or 'unsupported'}" for i in range(len(devices)))
            if fallback is None:
                raise InvalidArgument(f"no device supports operation {k} ({op.type.name}): {reasons}")
            choices.append(Choice(k, fallback, f"fallback: no device supports it ({reasons})"))
            continue
        scores = {i: _perf(caps[i], t, relaxed, preference) for i in able}
        best = min(able, key=lambda i: (scores[i], able.index(i)))
        others = ", ".join(f"{names[i]} {scores[i]:g}" for i in able)
        why = f"lowest relative {measure} for {t.name} ({others})" if len(able) > 1 else "the only device supporting it"
        missing = [f"{names[i]}: {support[i][k][1]}" for i in range(len(devices)) if i not in able]
        if missing:
            why += "; not supported by " + "; ".join(missing)
        choices.append(Choice(k, best, why))
    return tuple(choices)


def cut(model: Model, choices: Sequence[Choice]) -> list[tuple[int, list[int]]]:
    """(device, operations) per step, in an order that respects every dependency."""
    return subgraphs.cut(model, [c.device for c in choices])


def _known_shape(operand: Operand) -> bool:
    return not INFO[operand.type].is_tensor or (bool(operand.dimensions) and 0 not in operand.dimensions)


def temporaries(
    model: Model, steps: Sequence[Step], names: Sequence[str], memory_domains: Sequence[bool]
) -> tuple[Temporary, ...]:
    """How each result crossing steps travels (see the module docstring), in operand order."""
    main = model.main
    model_outputs = set(main.output_indexes)
    out: list[Temporary] = []
    for k, step in enumerate(steps):
        for o in step.outputs:
            consumers = tuple(j for j in range(k + 1, len(steps)) if o in steps[j].inputs)
            if not consumers:
                continue
            device = step.device
            others = sorted({names[steps[j].device] for j in consumers if steps[j].device != device})
            if o in model_outputs:
                buffer, why = False, "a model output: it goes back to the client anyway"
            elif others:
                buffer, why = False, f"read on {', '.join(others)}: it leaves {names[device]} anyway"
            elif not memory_domains[device]:
                buffer, why = False, f"{names[device]} has no memory domains (IDevice::allocate needs HAL 1.3)"
            elif not _known_shape(main.operands[o]):
                buffer, why = False, "its shape is unknown at plan time"
            else:
                buffer, why = True, f"every step using it runs on {names[device]}: it stays in the server"
            out.append(Temporary(o, k, consumers, buffer, why))
    return tuple(sorted(out, key=lambda t: t.operand))


def plan_model(
    model: Model,
    devices: Sequence[PlanDevice],
    preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
    fallback: int | None = None,
    memory_domains: Sequence[bool] | None = None,
) -> PartitionPlan:
    """The plan of ``model`` on ``devices``; ``fallback``: index of the device that runs
    what none supports (None: such a model is INVALID_ARGUMENT); ``memory_domains``: per
    device, whether it can allocate driver-managed buffers (None: every device can)."""
    if not devices:
        raise InvalidArgument("partitioning needs at least one device")
    choices = choose(model, devices, preference, fallback)
    cuts = cut(model, choices)
    steps = [
        Step(device, tuple(ops), tuple(inputs), tuple(outputs), step_model(model, ops, inputs, outputs))
        for (device, ops), (inputs, outputs) in zip(cuts, subgraphs.step_io(model, cuts))
    ]
    names = tuple(d.name for d in devices)
    domains = [True] * len(devices) if memory_domains is None else list(memory_domains)
    if len(domains) != len(devices):
        raise InvalidArgument(f"memory_domains has {len(domains)} entries for {len(devices)} devices")
    return PartitionPlan(model, names, choices, tuple(steps), temporaries(model, steps, names, domains))
