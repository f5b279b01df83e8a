"""Burst: the execution burst of a prepared model (``configureExecutionBurst``).

Two transports, one behaviour (same statuses, same death handling):

- the same-host fast path (DESIGN §2): requests and results in shared-memory
  rings with a doorbell (:mod:`nnhal.client.remote.fastpath`), used when the
  server offers it to this client (same host, a shared-memory directory);
- a bidirectional gRPC stream, in order, which the burst also opens (at the
  first execution that needs it) for a request or answer too large for the
  rings, and uses for everything when the fast path is refused or not asked for.

``fast``: None (default) takes the fast path when offered, silently falling back
to gRPC; True requires it (the refusal's HalError is raised); False uses gRPC
only. The burst lives until ``close``. Thread-safe (one execution at a time).

``execute`` takes a canonical Request and puts every status in the outcome;
``execute_numpy`` takes numpy arrays as ``PreparedModel.execute`` does (outputs in
``outcome.outputs``, the HalError it ends with raised), and on the fast path a layout
the burst has run before goes from the arrays straight to a compact call and from its
answer straight to the outputs (:meth:`NumpyIO.planned`), no Request made.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nnhal.client import steps
from nnhal.client.numpy_io import NumpyIO, no_model, numpy_execution, settle
from nnhal.client.outcome import NO_KEPT_ANSWER, ExecutionOutcome, KeptAnswer, kept_answer
from nnhal.client.remote import BurstStream, ExecutionOptions, FastBurstLink, RemoteSession, encoded
from nnhal.client.remote.transport import remaining_time
from nnhal.core import fastanswer
from nnhal.core.errors import HalError
from nnhal.core.types import ExecutionResult, Request

log = logging.getLogger(__name__)


class Burst:
    """An execution burst of one prepared model. Close it, or use ``with``."""

    def __init__(
        self,
        remote: RemoteSession,
        handle: str,
        *,
        fast: bool | None = None,
        ring_bytes: int = 0,
        numpy_io: Callable[[], NumpyIO] = no_model,
    ) -> None:
        """``ring_bytes``: the size asked for each fast-path ring (0: the server's default);
        ``numpy_io``: the model's numpy side (``execute_numpy``; raises when there is none)."""
        self._remote = remote
        self._handle = handle
        self._numpy_io = numpy_io
        self._lock = threading.Lock()
        self._fast: FastBurstLink | None = None
        self._stream: BurstStream | None = None
        if fast or (fast is None and remote.shm_dir):
            try:
                self._fast = FastBurstLink.open(remote, handle, ring_bytes)
            except HalError as err:
                if fast:
                    raise
                log.debug("no fast path for this burst (%s); using the gRPC stream", err.message)
        #: The gRPC stream and its requests' writer (``encoded.Requests``) of a burst that takes
        #: the stream only (no fast path): :meth:`execute` writes a request and sends it, no
        #: options made, no way chosen; None otherwise, and once closed.
        self._direct: tuple[BurstStream, encoded.Requests] | None = None
        if self._fast is None:
            stream = self._stream = remote.open_burst()
            self._direct = (stream, remote.burst_requests(stream, handle))

    @property
    def fast(self) -> bool:
        """Whether executions that fit the rings take the same-host fast path."""
        return self._fast is not None

    def _grpc_stream(self) -> BurstStream:
        stream = self._stream  # open: read without the lock (one attribute read is atomic)
        if stream is not None:
            return stream
        with self._lock:
            if self._stream is None:
                self._stream = self._remote.open_burst()
            return self._stream

    def execute(self, request: Request, *, measure: bool = False, timeout: float | None = None) -> ExecutionOutcome:
        """One execution; the status (transport failures included) is in the outcome.
        Raises DEAD_OBJECT at once when the server is known dead."""
        # The answer read apart, either way: the outcome made from it, no result.
        direct = self._direct
        if direct is not None:
            stream, written = direct
            # A request of the stream's kept layout, no scalars: its kept frame and the pools' data.
            data = None if measure or timeout is not None else written.plain(request)
            if data is None:
                data = written.write(request, measure, remaining_time(timeout), 0, False, True)
            if data is not None:  # else a pool that is not inline: the message built field by field
                r, pools, _ = answer = self._remote.burst_sent(stream, data)
                kept = self._kept
                if r is kept[0]:  # an answer alike the kept one: its fields, these pools
                    return ExecutionOutcome.of_kept(kept, pools, [])
                return self._outcome(answer)
        return ExecutionOutcome.of_answer(self._answered(request, ExecutionOptions.of(measure, timeout)))

    #: The outcome of the stream's answers alike (``outcome.kept_answer``): made at the first
    #: answer that one is read as alike another (``encoded.burst_answered``), then kept.
    _kept: KeptAnswer = NO_KEPT_ANSWER

    def _outcome(self, answer: fastanswer.Apart) -> ExecutionOutcome:
        """The outcome of a stream's answer not alike the kept one; one that is alike the
        answers before it is kept in its place (:meth:`execute`)."""
        kept = kept_answer(answer)
        if kept is None:
            return ExecutionOutcome.of_answer(answer)
        self._kept = kept
        return ExecutionOutcome.of_kept(kept, answer[1], [])

    def _answered(self, request: Request, options: ExecutionOptions) -> fastanswer.Apart:
        """One execution, its answer read apart: on the fast path when it fits the rings, else on
        the gRPC stream."""
        fast = self._fast
        if fast is not None:
            answer = fast.execute_apart(request, options)
            if answer is not None:
                return answer
        return self._remote.burst_answered(self._grpc_stream(), self._handle, request, options)

    def _run(self, request: Request, options: ExecutionOptions) -> ExecutionResult:
        return fastanswer.whole(self._answered(request, options))

    def execute_numpy(
        self, inputs: Sequence[np.ndarray | None], *, measure: bool = False, timeout: float | None = None
    ) -> ExecutionOutcome:
        """One execution on numpy arrays, as ``PreparedModel.execute``: the outputs in
        ``outcome.outputs`` (outputs of unknown shape retried once with the sizes the driver
        reported); raises the HalError it ends with (DEAD_OBJECT at once for a server known
        dead; INVALID_ARGUMENT for a prepared model made from a cache without its Model)."""
        numpy_io = self._numpy_io()
        sizes = None
        fast = self._fast
        options = ExecutionOptions.of(measure, timeout)
        # A layout seen before: on the fast path, from the arrays straight to a compact call;
        # over gRPC, to the request of the plan (no planning again). From the answer straight
        # to the outputs.
        planned = numpy_io.planned(inputs)
        if planned is not None:
            plan, parts = planned
            # The answer read apart (``fastanswer.Apart``), or a result alone: ``settle``'s arguments.
            answer: tuple[Any, ...] | None
            if fast is not None:
                answer = fast.execute_planned(plan.compact, parts, measure, timeout)
            else:
                answer = self._answered(plan.request(parts), options)
            if answer is not None:
                settled = settle(plan, *answer)
                if isinstance(settled, ExecutionOutcome):
                    return settled
                sizes = settled  # OUTPUT_INSUFFICIENT_SIZE: the retry takes the general path
        return steps.drive(numpy_execution(numpy_io, inputs, sizes), lambda request: self._run(request, options))

    def close(self) -> None:
        self._direct = None  # first: a later execution takes the stream's way again
        if self._fast is not None:
            self._fast.close()
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            self._remote.close_burst(stream)

    def __enter__(self) -> Burst:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
