"""A HAL method as the owner serves it (:class:`Method`), and what one call of it met as it
arrived (:class:`Arrival`): the level gate's refusal or the injected fault it took."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

from nnhal.core.enums import HalVersion
from nnhal.core.errors import HalError
from nnhal.server.executions import faults as injected
from nnhal.server.executions.faults import Fault

#: The default of ``Executions.method``'s ``fault`` and ``gate``: the method's own name.
SAME = "same"

#: The transport carrying the calls made in this context when it is not the one their
#: ``Method`` names (None): the same-host queue serves the gRPC adapters of every form on
#: its own thread and sets it there, so that their executions count as "same_host".
CARRIER: ContextVar[str | None] = ContextVar("nnhal_carrier", default=None)


class Method:
    """A HAL method as the owner serves it: ``name`` (what metrics count it by), ``what`` (how
    messages name one call of it), the level gate (``level``: the feature level it needs;
    None: none), the fault plan's name for it (``fault``; None: never faulted) and the
    histogram its durations go to; ``transport``: what carries its calls (``metrics.TRANSPORTS``),
    which the executions it launches are counted by."""

    __slots__ = ("_executed", "fault", "level", "name", "record", "transport", "what")

    def __init__(
        self,
        name: str,
        what: str,
        level: HalVersion | None,
        fault: str | None,
        record: Callable[[int, float | None], None],
        transport: str,
        counts: Mapping[str, Callable[[], object]],
    ) -> None:
        self.name, self.what, self.level, self.fault = name, what, level, fault
        self.transport = transport
        #: ``record(status, seconds)``: count one answer with ``status``; time it when it was
        #: launched (``seconds`` not None). Its series are resolved once (``DeviceMetrics.recorder``).
        self.record = record
        #: Each transport's count (``DeviceMetrics.execution_counts``), and — key None — the
        #: method's own: what :meth:`count_execution` calls, resolved once.
        self._executed: dict[str | None, Callable[[], object]] = {None: counts[transport]}
        self._executed.update(counts)

    def count_execution(self) -> None:
        """Count one execution a call of this method launched now, under the transport it
        travels on: ``CARRIER``'s when set, else the method's own."""
        self._executed[CARRIER.get()]()


@dataclass(frozen=True, slots=True)
class Arrival:
    """What a call met when it arrived (``Executions.arrive``): its level refusal, or the
    injected fault it took."""

    error: HalError | None = None
    fault: Fault | None = None

    def start(self) -> HalError | None:
        """The error the call answers at once (a refusal, an injected error), None to go on;
        an injected abort or exit happens here."""
        return self.error if self.error is not None else injected.at_start(self.fault)
