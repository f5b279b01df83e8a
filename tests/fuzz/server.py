"""The fuzz campaign behind ``make fuzz``: mutated models and requests through a real server.

``python -m tests.fuzz.server`` starts ``nnhal serve`` as a child process (loopback, with
memory limits: :data:`SERVER_ARGS`) and sends it, over gRPC, ``NNHAL_FUZZ_EXAMPLES`` mutated models and as many mutated
requests (default 20000 each) drawn from
``NNHAL_FUZZ_SEED`` (default: a random seed, printed so that a run can be repeated). Each
example is one mutated model — the in-process harness's structural mutations
(:func:`tests.fuzz.harness.mutated`), a VTS ValidateModel family
(:mod:`nnhal.conformance.mutations`), or an extreme shape (ranks beyond 32, dimensions of
2^31-1 and 2^32-1) — sent to getSupportedOperations_1_3 and prepareModel_1_3, and one mutated
request sent to executeSynchronously_1_3 or execute_1_3 of that model (or, when the model was
refused, of its unmutated seed). Every eighth example also sends garbage: random bytes, or a
valid message with a few bytes flipped, to a random method.

Findings, counted separately:

- crash: the server process exited (it is restarted and the campaign goes on);
- hang: a call got no answer within ``HANG_SECONDS`` (the gRPC deadline);
- transport error: any other gRPC error on a well-formed message;
- internal error: a GENERAL_FAILURE answer whose message says "internal error".

Prints progress, then the outcomes, one example of each distinct finding, the server's peak
RSS and how many lines its log grew by; exits 1 when anything was found.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
from hypothesis import HealthCheck, given, seed as hypothesis_seed, settings, strategies as st
from hypothesis.errors import HypothesisException

from nnhal.client.device import Device
from nnhal.conformance.mutations import MODEL_FAMILIES, request_mutations
from nnhal.core import wire_model, wire_request
from nnhal.core.enums import ErrorStatus
from nnhal.core.types import InlinePool, Model, Request
from nnhal.proto import service_pb2 as spb
from nnhal.testing.local_server import LocalServer
from tests.fuzz.harness import Case, _mutate_model, _mutate_request, request_pool, seeds

#: A call without an answer after this long is a hang (the server bounds executions at 15 s).
HANG_SECONDS = 60.0
ROUND = 250
#: The server's flags: memory limits, as a deployment sets them (``NNHAL_FUZZ_SERVER_ARGS``
#: replaces them; without limits an execution may allocate and compute as much as the
#: machine holds, which a fuzzer's padding of 2^31 then does for minutes).
SERVER_ARGS = "--memory-total 512MiB --memory-per-client 256MiB"
#: Examples in flight at once (a client thread each): the server's two slots stay busy.
IN_FLIGHT = 2
#: Methods garbage is sent to, with their gRPC shapes.
PLURAL = {
    "crash": "crashes",
    "hang": "hangs",
    "transport error": "transport errors",
    "internal error": "internal errors",
}
GARBAGE_METHODS = (
    ("/nnhal.v1.Device/getSupportedOperations_1_3", "unary"),
    ("/nnhal.v1.Device/prepareModel_1_3", "stream"),
    ("/nnhal.v1.Device/getCapabilities_1_3", "unary"),
    ("/nnhal.v1.Device/allocate", "unary"),
    ("/nnhal.v1.PreparedModel/executeSynchronously_1_3", "unary"),
    ("/nnhal.v1.PreparedModel/execute_1_3", "stream"),
    ("/nnhal.v1.PreparedModel/executeFenced", "unary"),
    ("/nnhal.v1.PreparedModel/release", "unary"),
)


@dataclass(frozen=True)
class Example:
    """One mutated model and request (with its pools' bytes), and how they were made."""

    case: Case
    model: Model
    request: Request
    kind: str
    #: Garbage for a method: (method index, bytes, flip a valid message?), or None.
    garbage: tuple[int, bytes, bool] | None = None


# -- generation ----------------------------------------------------------------------------
def _extreme(draw: Any, model: Model) -> Model:
    """A main-subgraph operand with a rank beyond what numpy broadcasts (32) or a huge dimension."""
    operands = list(model.main.operands)
    k = draw(st.integers(0, len(operands) - 1))
    if draw(st.booleans()):
        dims: tuple[int, ...] = (1,) * draw(st.sampled_from([33, 50, 64, 65, 200]))
    else:
        dims = list(operands[k].dimensions) or [1]  # type: ignore[assignment]
        at = draw(st.integers(0, len(dims) - 1))
        dims[at] = draw(st.sampled_from([2**31 - 1, 2**32 - 1, 2**24, 1 << 20]))  # type: ignore[index]
        dims = tuple(dims)
    operands[k] = replace(operands[k], dimensions=dims)
    return replace(model, main=replace(model.main, operands=tuple(operands)))


def _vts(draw: Any, model: Model) -> Model:
    family = draw(st.sampled_from(MODEL_FAMILIES))
    variants = [m for _, _, m in family(model)][:64]
    return draw(st.sampled_from(variants)) if variants else model


@st.composite
def examples(draw: Any, cases: tuple[Case, ...]) -> tuple[Example, list[bytearray]]:
    case = draw(st.sampled_from(cases))
    kind = draw(st.sampled_from(["harness", "harness", "harness", "vts", "vts+harness", "extreme", "extreme+harness"]))
    model = case.model
    if kind.startswith("vts"):
        model = _vts(draw, model)
    if kind.startswith("extreme"):
        model = _extreme(draw, model)
    if kind.endswith("harness"):
        for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
            model = _mutate_model(draw, model)
    request = case.request
    pools = [request_pool(p) for p in request.pools]
    if draw(st.booleans()):
        request = draw(st.sampled_from([r for _, _, r in request_mutations(request)] or [request]))
    for _ in range(draw(st.integers(0, 3))):
        request = _mutate_request(draw, request, pools)
    if draw(st.integers(0, 7)) == 0 and request.inputs and request.inputs[0].dimensions == ():
        k = draw(st.integers(0, len(request.inputs) - 1))
        inputs = list(request.inputs)
        inputs[k] = replace(inputs[k], dimensions=(1,) * draw(st.sampled_from([33, 50, 65])))
        request = replace(request, inputs=tuple(inputs))
    garbage = None
    if draw(st.integers(0, 7)) == 0:
        garbage = (
            draw(st.integers(0, len(GARBAGE_METHODS) - 1)),
            draw(st.binary(min_size=0, max_size=256)),
            draw(st.booleans()),
        )
    return Example(case, model, request, kind, garbage), pools


# -- the run -------------------------------------------------------------------------------
@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    outcomes: Counter[str] = field(default_factory=Counter)
    #: finding kind -> key -> (count, first example)
    findings: dict[str, dict[str, tuple[int, str]]] = field(
        default_factory=lambda: {"crash": {}, "hang": {}, "transport error": {}, "internal error": {}}
    )
    models: int = 0
    requests: int = 0
    garbage: int = 0
    #: Where the first example of each finding is written (model and request as protobuf), if set.
    out: Path | None = None

    def add(self, outcome: str) -> None:
        with self.lock:
            self.outcomes[outcome] += 1

    def find(self, kind: str, key: str, example: str, drawn: Example | None = None) -> None:
        with self.lock:
            count, first = self.findings[kind].get(key, (0, ""))
            self.findings[kind][key] = (count + 1, first or example[:600])
            n = sum(len(v) for v in self.findings.values())
        if count == 0 and drawn is not None and self.out is not None:
            stem = self.out / f"{kind.replace(' ', '-')}-{n}"
            stem.with_suffix(".model.pb").write_bytes(wire_model.model_to_bytes(drawn.model))
            stem.with_suffix(".request.pb").write_bytes(wire_request.request_to(drawn.request).SerializeToString())
            stem.with_suffix(".txt").write_text(f"{key}\n{example}\n")

    def total(self, kind: str) -> int:
        return sum(c for c, _ in self.findings[kind].values())


class Target:
    """The server under test and one session on it; restarted after a crash."""

    def __init__(self, log_path: Path, args: list[str]) -> None:
        self.log_path = log_path
        self.args = args
        self.lock = threading.Lock()
        self.generation = 0
        self._start()

    def _start(self) -> None:
        self.server = LocalServer(*self.args, log_file=self.log_path)
        self.device = Device.connect(self.server.address)
        self.channel = grpc.insecure_channel(self.server.address)
        self.seed_models: dict[str, str] = {}
        self.generation += 1

    def alive(self) -> bool:
        return self.server.proc.poll() is None

    def restart(self, generation: int) -> None:
        with self.lock:
            if generation != self.generation:
                return  # another thread restarted it already
            try:
                self.device.close()
            except Exception:
                pass
            self.channel.close()
            self.server.stop()
            self._start()

    def reconnect(self, generation: int) -> None:
        """A new session on the same server (the old one's connection was declared dead: a
        server that stalled past the client's keepalive, e.g. on a loaded machine)."""
        with self.lock:
            if generation != self.generation:
                return
            old = self.device
            self.device = Device.connect(self.server.address)
            self.seed_models = {}
            self.generation += 1
        try:
            old.close()
        except Exception:  # its connection is gone already
            pass

    def stop(self) -> None:
        self.device.close()
        self.channel.close()
        self.server.stop()


def _status_of(msg: Any) -> tuple[int, str]:
    return int(msg.status), str(msg.message)


def _check(tally: Tally, what: str, status: int, message: str, example: Example) -> None:
    if status == ErrorStatus.GENERAL_FAILURE and "internal error" in message:
        ops = sorted({op.type.name for op in example.model.main.operations})
        tally.find(
            "internal error", f"{what}: {message[:160]}", f"{example.case.name} ({example.kind}, {ops})", example
        )


def _call(tally: Tally, target: Target, what: str, example: Example, fn: Callable[[], Any]) -> Any:
    """``fn()``, or None after recording a hang, a transport error or a crash."""
    generation = target.generation
    try:
        return fn()
    except grpc.RpcError as err:
        code = err.code() if hasattr(err, "code") else None
        details = err.details() if hasattr(err, "details") else str(err)
        where = f"{example.case.name} ({example.kind})"
        if not target.alive():
            tally.find(
                "crash", f"server exited during {what}", f"{where}: exit {target.server.proc.returncode}", example
            )
            target.restart(generation)
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
            tally.find("hang", what, where, example)
        else:
            tally.find("transport error", f"{what}: {code}: {str(details)[:120]}", where, example)
            if code == grpc.StatusCode.UNAVAILABLE:
                target.reconnect(generation)  # its session was closed with the connection
        return None


def _garbage(tally: Tally, target: Target, example: Example, valid: bytes) -> None:
    assert example.garbage is not None
    index, blob, flip = example.garbage
    method, shape = GARBAGE_METHODS[index]
    if flip and valid:
        data = bytearray(valid)
        for i, b in enumerate(blob[:8]):
            data[(b * 131 + i * 7919) % len(data)] ^= b or 0xFF
        blob = bytes(data)
    generation = target.generation
    try:
        if shape == "unary":
            target.channel.unary_unary(method)(blob, timeout=HANG_SECONDS)
        else:
            list(target.channel.unary_stream(method)(blob, timeout=HANG_SECONDS))
        tally.add("garbage answered")
    except grpc.RpcError as err:
        code = err.code() if hasattr(err, "code") else None
        if not target.alive():
            tally.find("crash", f"server exited on garbage to {method}", repr(blob[:64]))
            target.restart(generation)
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
            tally.find("hang", f"garbage to {method}", repr(blob[:64]))
        else:
            tally.add(f"garbage refused ({code.name if code else '?'})")
    with tally.lock:
        tally.garbage += 1


def _seed_handle(tally: Tally, target: Target, example: Example) -> str:
    """The seed model prepared once per server (the target of requests for refused models)."""
    name = example.case.name
    handle = target.seed_models.get(name)
    if handle is None:
        msg = spb.PrepareModelRequest(session=target.device.remote.session_id)
        wire_model.model_to(example.case.model, msg.model)
        events = _call(
            tally,
            target,
            "prepare seed",
            example,
            lambda: list(target.device.remote.stubs.device.prepareModel_1_3(msg)),
        )
        handle = events[-1].notify.prepared_model.handle if events and events[-1].HasField("notify") else ""
        target.seed_models[name] = handle
    return handle


def exercise(tally: Tally, target: Target, example: Example, pools: list[bytearray]) -> None:
    session = target.device.remote.session_id
    stubs = target.device.remote.stubs
    try:
        model_msg = wire_model.model_to(example.model)
    except (ValueError, TypeError, OverflowError):
        tally.add("model not representable on the wire")
        return
    with tally.lock:
        tally.models += 1
    supported = spb.SupportedOperationsRequest(session=session)
    supported.model.CopyFrom(model_msg)
    answer = _call(
        tally,
        target,
        "getSupportedOperations_1_3",
        example,
        lambda: stubs.device.getSupportedOperations_1_3(supported, timeout=HANG_SECONDS),
    )
    if answer is not None:
        _check(tally, "getSupportedOperations_1_3", *_status_of(answer), example)
    prepare = spb.PrepareModelRequest(session=session)
    prepare.model.CopyFrom(model_msg)
    events = _call(
        tally,
        target,
        "prepareModel_1_3",
        example,
        lambda: list(stubs.device.prepareModel_1_3(prepare, timeout=HANG_SECONDS)),
    )
    handle, own = "", False
    if events:
        notify = events[-1].notify
        status, message = _status_of(notify)
        _check(tally, "prepareModel_1_3", status, message, example)
        tally.add("model prepared" if status == ErrorStatus.NONE else "model refused")
        handle, own = notify.prepared_model.handle, bool(notify.prepared_model.handle)
    if not handle and target.alive():
        handle = _seed_handle(tally, target, example)
    execute = spb.ExecuteRequest(session=session, prepared_model=handle, loop_timeout_ns=500_000_000)
    request = replace(example.request, pools=tuple(InlinePool(bytes(p), len(p)) for p in pools))
    try:
        wire_request.request_to(request, execute.request)
    except (ValueError, TypeError, OverflowError):
        tally.add("request not representable on the wire")
        execute = None  # type: ignore[assignment]
    if execute is not None and handle:
        with tally.lock:
            tally.requests += 1
        if len(pools) % 2 == 0:
            result = _call(
                tally,
                target,
                "executeSynchronously_1_3",
                example,
                lambda: stubs.prepared_model.executeSynchronously_1_3(execute, timeout=HANG_SECONDS),
            )
        else:
            streamed = _call(
                tally,
                target,
                "execute_1_3",
                example,
                lambda: list(stubs.prepared_model.execute_1_3(execute, timeout=HANG_SECONDS)),
            )
            result = streamed[-1].notify if streamed else None
        if result is not None:
            status, message = _status_of(result)
            _check(tally, "execution", status, message, example)
            tally.add("executed" if status == ErrorStatus.NONE else f"execution refused ({ErrorStatus(status).name})")
    if own and target.alive():
        release = spb.ReleaseRequest(session=session, handle=handle)
        _call(tally, target, "release", example, lambda: stubs.prepared_model.release(release, timeout=HANG_SECONDS))
    if example.garbage is not None:
        valid = execute.SerializeToString() if execute is not None else prepare.SerializeToString()
        _garbage(tally, target, example, valid)
    if not target.alive():
        tally.find("crash", "server exited", f"{example.case.name} ({example.kind})")
        target.restart(target.generation)


def _peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def main() -> int:
    total = int(os.environ.get("NNHAL_FUZZ_EXAMPLES", "20000"))
    seed = int(os.environ.get("NNHAL_FUZZ_SEED") or random.SystemRandom().randrange(1 << 32))
    budget = float(os.environ.get("NNHAL_FUZZ_SECONDS", "0")) or float("inf")
    cases = seeds(1)
    log_path = Path(os.environ.get("NNHAL_FUZZ_LOG", "")) if os.environ.get("NNHAL_FUZZ_LOG") else None
    server_args = os.environ.get("NNHAL_FUZZ_SERVER_ARGS", SERVER_ARGS).split()
    tally = Tally()
    if os.environ.get("NNHAL_FUZZ_OUT"):
        tally.out = Path(os.environ["NNHAL_FUZZ_OUT"])
        tally.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nnhal-fuzz-") as tmp:
        log_path = log_path or Path(tmp) / "server.log"
        target = Target(log_path, server_args)
        print(
            f"fuzz: seed {seed}: {total} models and {total} requests from {len(cases)} seed models through a server "
            f"(nnhal serve {' '.join(server_args)}; pid {target.server.pid}, log {log_path})",
            flush=True,
        )
        pool = ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="fuzz")
        slots = threading.BoundedSemaphore(IN_FLIGHT)

        def body(drawn: tuple[Example, list[bytearray]]) -> None:
            slots.acquire()

            def run() -> None:
                try:
                    exercise(tally, target, *drawn)
                except Exception as err:
                    tally.find("crash", f"fuzz client: {err!r}"[:160], drawn[0].case.name)
                finally:
                    slots.release()

            pool.submit(run)

        rounds = 0

        def left() -> int:
            # Until ``total`` models and ``total`` requests were sent (a model the wire cannot
            # carry, or a request without a model to run on, does not count).
            return max(0, total - min(tally.models, tally.requests))

        while left() and time.monotonic() - start < budget:
            rounds += 1
            run: Any = hypothesis_seed(seed * 1_000_003 + rounds)(
                settings(
                    max_examples=min(ROUND, left() + IN_FLIGHT),
                    deadline=None,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                )(given(examples(cases))(body))
            )
            try:
                run()
            except HypothesisException as err:
                print(f"fuzz: round {rounds}: {err!r}", flush=True)
            if rounds % 8 == 0:
                print(
                    f"fuzz: {tally.models} models, {tally.requests} requests, {tally.garbage} garbage, "
                    f"{time.monotonic() - start:.0f} s; findings: "
                    + ", ".join(f"{tally.total(k)} {PLURAL[k]}" for k in PLURAL),
                    flush=True,
                )
        pool.shutdown(wait=True)
        peak = _peak_rss_mib(target.server.pid)
        log_lines = len(log_path.read_text(errors="replace").splitlines())
        tracebacks = log_path.read_text(errors="replace").count("Traceback")
        target.stop()
    elapsed = time.monotonic() - start
    print(f"fuzz: outcomes: {dict(sorted(tally.outcomes.items()))}")
    for kind, found in tally.findings.items():
        for key, (count, first) in sorted(found.items(), key=lambda kv: -kv[1][0]):
            print(f"  {kind} x{count}: {key}\n      e.g. {first}")
    print(f"fuzz: server peak RSS {peak:.0f} MiB; server log {log_lines} lines, {tracebacks} tracebacks")
    print(
        f"fuzz: seed {seed}: {tally.models} models, {tally.requests} requests, {tally.garbage} garbage messages "
        f"in {elapsed:.0f} s: " + ", ".join(f"{tally.total(k)} {PLURAL[k]}" for k in PLURAL)
    )
    return 1 if any(tally.total(k) for k in tally.findings) else 0


if __name__ == "__main__":
    sys.exit(main())
