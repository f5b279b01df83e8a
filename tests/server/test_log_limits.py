"""log_limits: repeated warnings pass ``burst`` times per window, then one line says how many
were dropped; gRPC's records of garbage lose their traceback; INFO lines are never dropped."""

from __future__ import annotations

import logging

from google.protobuf.message import DecodeError

from nnhal.server.log_limits import RateLimitFilter, TransportNoiseFilter


def _record(
    msg: str, level: int = logging.WARNING, name: str = "nnhal.x", exc: BaseException | None = None
) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord(name, level, __file__, 1, msg, ("a",), exc_info)


def test_repeated_warnings_are_counted_not_written() -> None:
    now = [0.0]
    limit = RateLimitFilter(burst=10, window=10.0, clock=lambda: now[0])
    passed = [limit.filter(_record("queue full for %s")) for _ in range(1_509)]
    assert passed.count(True) == 10
    assert all(limit.filter(_record("queue full for %s", logging.INFO)) for _ in range(100))
    assert limit.filter(_record("another %s"))  # another template has its own budget
    now[0] = 10.5
    summary = _record("queue full for %s")
    assert limit.filter(summary)
    assert summary.getMessage() == "queue full for a (1,499 more in the last 10 s)"
    assert summary.suppressed == 1_499  # type: ignore[attr-defined]


def test_undecodable_requests_lose_their_traceback() -> None:
    try:
        raise DecodeError("Error parsing message with type 'nnhal.v1.ExecuteRequest'")
    except DecodeError as err:
        record = _record(
            "Unexpected [DecodeError] raised by servicer method [%s]", logging.ERROR, "grpc._cython.cygrpc", err
        )
    assert TransportNoiseFilter().filter(record)
    assert record.exc_info is None and record.levelno == logging.WARNING
    text = logging.Formatter().format(record)
    assert "\n" not in text and "could not be decoded" in text and "nnhal.v1.ExecuteRequest" in text
    mine = _record("boom %s", logging.ERROR, "nnhal.server", ValueError("bug"))
    assert TransportNoiseFilter().filter(mine) and mine.exc_info is not None  # our own errors keep theirs
