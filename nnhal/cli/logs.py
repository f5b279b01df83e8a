"""Logging for the command line: plain text, or one JSON object per line (``--log-format json``).

A JSON line always has ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger`` and
``message``; ``exception`` when the record carries one; and every field a caller attached
with ``extra=`` (e.g. ``request_id``), so the server can add fields without a change here.
Values JSON cannot hold are written as their ``str``. A text line of a record carrying a
``request_id`` (a server call's, see ``nnhal.server.rpc.request_id``) ends with ``[request ID]``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``, and the record's request id when it has one."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        rid = getattr(record, "request_id", None)
        return f"{text} [request {rid}]" if rid else text


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in messages are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


class StderrHandler(logging.StreamHandler[TextIO]):
    """Writes each record to ``sys.stderr`` as it is when the record comes, not as it was when
    the handler was made: a program (or a test) that runs ``nnhal`` in-process and swaps or
    closes its stderr afterwards never has records written to a stream it closed."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass  # always the current sys.stderr


def configure(level: int, log_format: str = "text") -> None:
    """Send the root logger's records to stderr at ``level`` in ``log_format`` (text | json),
    replacing any handler configured before."""
    handler = StderrHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
