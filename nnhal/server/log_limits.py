"""Logs that survive garbage: transport noise in one line, repeated warnings rate-limited.

Two ``logging.Filter`` s for the server's log handler (``install`` puts both on every handler
of the root logger):

- :class:`TransportNoiseFilter`: gRPC logs a request it cannot decode (a protobuf
  ``DecodeError``) and a client stream that broke while the server wrote to it
  (``ExecuteBatchError``) with a full traceback of gRPC's own frames. Such a record becomes one
  WARNING line naming what happened (the method, the exception's first line) and carries no
  traceback: it is a client's mistake or departure, not a server fault.
- :class:`RateLimitFilter`: a WARNING or worse repeated from the same place (logger and
  message template) passes at most ``burst`` times per ``window`` seconds; the rest are
  dropped and counted, and the next one that passes after the window says how many were
  dropped: ``… (1,499 more in the last 10 s)`` (also as the ``suppressed`` field of a JSON
  line). A flood that stops is summed up by its next occurrence. Records below WARNING
  (the per-call INFO lines) are never dropped.

Both are thread-safe and cheap (a dictionary lookup and a lock per WARNING record).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

#: Exception class names whose gRPC records are a client's doing: one line, no traceback.
CLIENT_SIDE = {
    "DecodeError": "a request could not be decoded",
    "ExecuteBatchError": "a client's stream broke",
}
#: Defaults: this many records per key pass per window of this many seconds.
BURST = 10
WINDOW_S = 10.0


class TransportNoiseFilter(logging.Filter):
    """Rewrites gRPC's records of undecodable requests and broken streams as one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("grpc") or not record.exc_info or record.exc_info[1] is None:
            return True
        err = record.exc_info[1]
        what = CLIENT_SIDE.get(type(err).__name__)
        if what is None:
            return True
        detail = (str(err).strip().splitlines() or [""])[0][:200]
        said = record.getMessage()
        # The template names the kind, so that the rate limit counts each kind on its own.
        record.msg = what + " (%s: %s): %s"
        record.args = (type(err).__name__, detail, said)
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class RateLimitFilter(logging.Filter):
    """At most ``burst`` WARNING-or-worse records per (logger, template) per ``window`` s."""

    def __init__(self, burst: int = BURST, window: float = WINDOW_S, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.burst, self.window, self._clock = burst, window, clock
        self._lock = threading.Lock()
        #: key -> [window start, records passed in it, records dropped in it]
        self._keys: dict[tuple[str, object], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.msg)
        now = self._clock()
        with self._lock:
            entry = self._keys.get(key)
            dropped, since = 0, 0.0
            if entry is None or now - entry[0] >= self.window:
                if entry is not None:
                    dropped, since = int(entry[2]), now - entry[0]
                self._keys[key] = [now, 1, 0]
                if len(self._keys) > 10_000:  # templates are few; bound the table all the same
                    self._keys = {k: v for k, v in self._keys.items() if now - v[0] < self.window}
            elif entry[1] < self.burst:
                entry[1] += 1
                return True
            else:
                entry[2] += 1
                return False
        if dropped:
            record.suppressed = dropped
            record.msg = f"{record.getMessage()} ({dropped:,} more in the last {since:.0f} s)"
            record.args = None
        return True


def install(logger: logging.Logger | None = None) -> None:
    """Put both filters on every handler of ``logger`` (the root logger by default), once."""
    for handler in (logger or logging.getLogger()).handlers:
        for kind in (TransportNoiseFilter, RateLimitFilter):
            if not any(isinstance(f, kind) for f in handler.filters):
                handler.addFilter(kind())


_garbage = logging.getLogger("nnhal.garbage")


def undecodable(method: str, err: BaseException) -> None:
    """Log that a message sent to ``method`` could not be decoded: one WARNING line without a
    traceback (a client's garbage), rate-limited with gRPC's own records of the same kind."""
    detail = (str(err).strip().splitlines() or [""])[0][:200]
    _garbage.warning(CLIENT_SIDE["DecodeError"] + " (%s): %s", method, detail)


def broken_stream(method: str, detail: str) -> None:
    """Log that a client's stream to ``method`` ended before it carried a request: one WARNING
    line, rate-limited with gRPC's records of broken streams."""
    _garbage.warning(CLIENT_SIDE["ExecuteBatchError"] + " (%s): %s", method, detail)
