"""``nnhal serve --record DIR``: every session's HAL calls of a device, one file per session.

A :class:`Recorder` is an observer of a device's owner (``executions.hooks``): told of each
call and its canonical answer, it appends the call to its session's file
(``nnhal.core.recording``). A file is made at a session's first recorded call, named
``<device>-<UTC time>-<n>.nnrec`` (never the session id: that is the session's secret), and
ended (its end frame written) when the session closes or the server stops.

What is captured — the user's models and data — is listed in ``docs/recording.md``.
Recording costs the calls that are recorded: pools are hashed, new bytes written and each
call's frame flushed; the calls are answered first only in the sense that a write failure
is logged (once per file) and never fails the call.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from pathlib import Path

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.recorded import model_entry, outputs_entry, request_entry
from nnhal.core.recording import Entry, RecordingWriter
from nnhal.core.types import ExecutionResult, SharedMemoryPool
from nnhal.server.driver import Driver
from nnhal.server.executions.calls import CachedPreparation, Execution, Preparation, Prepared
from nnhal.server.executions.hooks import Call, Observer, Timings
from nnhal.server.pieces import contiguous
from nnhal.server.shared_regions import open_region

log = logging.getLogger(__name__)


class _SessionFile:
    """One session's file and the names its handles are recorded under (``m1``, ``m2`` …)."""

    def __init__(self, writer: RecordingWriter) -> None:
        self.writer = writer
        self.names: dict[str, str] = {}
        self.failed = False

    def name(self, handle: str) -> str:
        """The recorded name of the server handle ``handle`` (made at its first sight)."""
        name = self.names.get(handle)
        if name is None:
            name = self.names.setdefault(handle, f"m{len(self.names) + 1}")
        return name


class Recorder(Observer):
    """Records the calls of ``driver``'s sessions into ``directory`` (made if missing).
    Thread-safe; :meth:`close` ends every file (the server's stop calls it)."""

    def __init__(self, directory: Path, driver: Driver) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.driver = driver
        self._files: dict[str, _SessionFile] = {}
        self._shared_in: dict[int, dict[int, bytes]] = {}
        self._timings: dict[int, Timings] = {}
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._t0 = time.perf_counter()
        self._closed = False
        driver.session_closed.append(self._end)

    # -- hooks --------------------------------------------------------------------------
    def started(self, call: Call) -> None:
        args = call.args
        if isinstance(args, Execution) and any(isinstance(p, SharedMemoryPool) for p in args.request.pools):
            # A shared pool's inputs as they are before the execution writes its outputs.
            self._shared_in[id(args)] = self._read_shared(args)

    def answered(self, call: Call, answer: object) -> None:
        args = call.args
        if not isinstance(args, Execution | Preparation | CachedPreparation):
            self._timings.pop(id(args), None)
            return  # refused before its arguments were read: nothing a replay could send
        shared_in = self._shared_in.pop(id(args), None)
        f = self._file(args.session)
        if f is None or f.failed:
            return
        try:
            f.writer.call(self._entry(f, call, args, answer, shared_in))
        except (OSError, ValueError) as err:
            f.failed = True
            log.warning("recording to %s stopped: %s", f.writer.path, err)

    def finished(self, call: Call, status: ErrorStatus, timings: Timings) -> None:
        self._timings[id(call.args)] = timings

    # -- files --------------------------------------------------------------------------
    def _file(self, session: str) -> _SessionFile | None:
        f = self._files.get(session)
        if f is not None:
            return f
        with self._lock:
            f = self._files.get(session)
            if f is None and not self._closed and self._open(session):
                stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
                path = self.directory / f"{self.driver.config.name}-{stamp}-{next(self._numbers)}.nnrec"
                header = {
                    "recorder": "server",
                    "device": self.driver.config.name,
                    "feature_level": self.driver.config.feature_level.label,
                    "started": stamp,
                }
                try:
                    f = _SessionFile(RecordingWriter(path, header))
                except OSError as err:
                    log.warning("cannot record a session to %s: %s", path, err)
                    return None
                self._files[session] = f
            return f

    def _open(self, session: str) -> bool:
        """Whether ``session`` is still open (a late answer of an ended one makes no new file)."""
        try:
            self.driver.session(session)
        except HalError:
            return False
        return True

    def _end(self, sid: str) -> None:
        """End the file of session ``sid`` (the driver calls this when the session closed)."""
        with self._lock:
            f = self._files.pop(sid, None)
        if f is not None:
            try:
                f.writer.close()
            except OSError as err:
                log.warning("cannot end the recording %s: %s", f.writer.path, err)

    def close(self) -> None:
        """End every file; later calls are not recorded."""
        with self._lock:
            self._closed = True
        for sid in list(self._files):
            self._end(sid)

    # -- entries ------------------------------------------------------------------------
    def _entry(
        self, f: _SessionFile, call: Call, args: object, answer: object, shared_in: dict[int, bytes] | None
    ) -> Entry:
        blob = f.writer.blob
        timings = self._timings.pop(id(args), None)
        entry: Entry = {"method": call.method, "what": call.what}
        if timings is not None:
            entry["arrived_us"] = round((timings.arrived - self._t0) * 1e6)
            entry["duration_us"] = round(timings.seconds * 1e6)
        if isinstance(args, Execution):
            entry["kind"] = "execute"
            entry["args"] = {
                "prepared_model": f.name(args.prepared_model),
                "request": request_entry(args.request, blob, shared_in),
                "measure": args.measure,
                "deadline_us": _remaining_us(args.deadline_ns, timings),
                "loop_timeout_ns": args.loop_timeout_ns,
            }
        elif isinstance(args, Preparation):
            entry["kind"] = "prepare"
            entry["args"] = {
                "model": model_entry(args.model, blob),
                "preference": args.preference.name,
                "priority": args.priority.name,
                "deadline_us": _remaining_us(args.deadline_ns, timings),
                "token": args.token.hex(),
            }
        elif isinstance(args, CachedPreparation):
            entry["kind"] = "prepare_from_cache"
            entry["args"] = {
                "model_cache": [blob(contiguous(c)) for c in args.model_cache],
                "data_cache": [blob(contiguous(c)) for c in args.data_cache],
                "token": args.token.hex(),
                "deadline_us": _remaining_us(args.deadline_ns, timings),
            }
        status = getattr(answer, "status", ErrorStatus.NONE)
        entry["status"] = ErrorStatus(status).name
        entry["message"] = str(getattr(answer, "message", ""))
        if isinstance(answer, ExecutionResult) and isinstance(args, Execution):
            pools = dict(answer.output_pools)
            if shared_in is not None:
                pools.update(self._read_shared(args, outputs_only=True))
            entry["answer"] = outputs_entry(answer.status, answer.output_shapes, answer.timing, pools, blob)
        elif isinstance(answer, Prepared):
            entry["answer"] = {"handle": f.name(answer.handle)}
        return entry

    def _read_shared(self, args: Execution, outputs_only: bool = False) -> dict[int, bytes]:
        """The contents of the request's shared pools (those holding outputs only, with
        ``outputs_only``) by pool index; a pool that cannot be read is left out."""
        policy = self.driver.config.shared_memory
        if policy is None:
            return {}
        wanted = {a.location.pool_index for a in args.request.outputs} if outputs_only else None
        out: dict[int, bytes] = {}
        for i, pool in enumerate(args.request.pools):
            if not isinstance(pool, SharedMemoryPool) or (wanted is not None and i not in wanted):
                continue
            try:
                region = open_region(policy, pool, f"recording pool {i}", None)
                try:
                    buf = bytearray(pool.size)
                    region.read(pool.offset, memoryview(buf))
                finally:
                    region.close()
            except HalError:
                continue
            out[i] = bytes(buf)
        return out


def _remaining_us(deadline_ns: int | None, timings: Timings | None) -> int | None:
    """A deadline as the time it left when the call arrived (microseconds), as a client
    sends it; None for none."""
    if deadline_ns is None:
        return None
    arrived_ago = 0.0 if timings is None else time.perf_counter() - timings.arrived
    return round((deadline_ns - time.monotonic_ns()) / 1e3 + arrived_ago * 1e6)
