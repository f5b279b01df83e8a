"""The asyncio client: :class:`Device` and :class:`PreparedModel` on ``grpc.aio`` channels.

Same semantics as the sync client (:mod:`nnhal.client.device`): one session per device
proxy (``openSession``), request ids, several devices (``device=``), TLS, HAL deadlines
on the wire, and death handling — a killed or frozen server resolves every awaiting call
with DEAD_OBJECT exactly once, within the sync client's bounds, and fails later calls at
once. Many executions may be in flight at once from one event loop.

Modules: :mod:`nnhal.client.remote.aio_session` (the channel, session stream, death, the one
call path and the transport of the HAL calls, shared with the sync client),
:mod:`.device` (``Device``), :mod:`.prepared_model` (``PreparedModel``), :mod:`.burst`
(``Burst``), :mod:`.buffer` (``Buffer``), :mod:`.fenced` (``FencedExecution``),
:mod:`.reusable_execution` (``ReusableExecution``), :mod:`.aidl_burst` (``AidlBurst``),
:mod:`.partition` (``Partitioner``). Every HAL call is the sync client's
(:mod:`nnhal.client.forms`, :mod:`nnhal.client.remote.calls`, ``hidl``, ``aidl``), awaited.
"""

from nnhal.client.aio.buffer import Buffer
from nnhal.client.aio.burst import Burst
from nnhal.client.aio.device import Device
from nnhal.client.aio.prepared_model import PreparedModel
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote.transport import TlsConfig

__all__ = ["Buffer", "Burst", "Device", "ExecutionOutcome", "PreparedModel", "TlsConfig"]
