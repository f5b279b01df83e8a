"""Issue #24's acceptance figures: each attack against a fresh server at the acceptance
limits (64 MiB per client, 256 MiB total), a victim executing meanwhile; prints one line
per attack: peak server RSS, RSS at the start and after release, the victim's statuses.

    python -m tests.adversarial.acceptance [inline|unread|zero-window|mass|silent-queue|all] [--as BYTES]

``--as`` starts the server under that address-space limit (``prlimit``) and counts the
GENERAL_FAILUREs the attackers met. A measuring tool, not a test (the tests of this folder
assert at smaller counts); after each line it says whether the figures are within #24's
bounds (peak at most the total limit + 150 MiB over the start, RSS back within 64 MiB of
it, at least 200 victim executions all NONE, no GENERAL_FAILURE) and exits 1 if one is not.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import numpy as np

from nnhal.client.device import Device
from nnhal.client.remote import FastBurstLink
from nnhal.client.remote.messages import ExecutionOptions, execute_request
from nnhal.core import fastring, samehost, wire_request
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject
from nnhal.core.wire import MAX_MESSAGE_BYTES
from nnhal.proto import service_pb2 as spb, service_pb2_grpc as sgrpc
from nnhal.server.device_config import DeviceConfig
from nnhal.testing.child import ChildServer
from tests.adversarial.conftest import let_go, prepared_small, rss_bytes, victim_runs
from tests.adversarial.raw_h2 import ZeroWindowClient
from tests.adversarial.test_message_caps import MARGIN, PeakRss
from tests.conftest import one_io_request, ones, relu_chain

MiB = 1 << 20
PER_CLIENT, TOTAL = 64 * MiB, 256 * MiB
LIMITS = ("--memory-per-client", str(PER_CLIENT), "--memory-total", str(TOTAL))
#: The largest single message the server receives at these limits.
RECEIVE_CAP = DeviceConfig(memory_per_client=PER_CLIENT, memory_total=TOTAL).message_cap(MAX_MESSAGE_BYTES)
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 1 << 30), ("grpc.use_local_subchannel_pool", 1)]
EXECUTE_1_3 = "/nnhal.v1.PreparedModel/execute_1_3"
VICTIM_RUNS = 200


class Server(ChildServer):
    def __init__(self, *args: str, address_space: int | None = None) -> None:
        prefix: list[str] = []
        if address_space:
            prlimit = shutil.which("prlimit")
            if prlimit is None:
                raise SystemExit("prlimit is not installed")
            prefix = [prlimit, f"--as={address_space}"]

        def command(address: str, port_file: object) -> list[str]:
            serve = ["-m", "nnhal", "serve", "--listen", address, "--port-file", str(port_file), *args]
            return [*prefix, sys.executable, *serve]

        super().__init__(command, on_failure=DeadObject)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


Outcome = collections.Counter[str]


def _victim(address: str, runs: int = VICTIM_RUNS) -> list[ErrorStatus]:
    with Device.connect(address, client_name="victim") as victim, prepared_small(victim) as pm:
        return victim_runs(pm, runs)


def _spread_victim(address: str, attack_done: threading.Event) -> list[ErrorStatus]:
    """The victim's executions, spread over the attack (a few at a time until it is done)."""
    statuses: list[ErrorStatus] = []
    with Device.connect(address, client_name="victim") as victim, prepared_small(victim) as pm:
        for _ in range(2000):
            statuses += victim_runs(pm, 4)
            if attack_done.is_set() and len(statuses) >= VICTIM_RUNS:
                break
            time.sleep(0.02)
    return statuses


def inline(address: str, seen: Outcome) -> list[ErrorStatus]:
    """16 sessions, each sending (receive cap - 1 MiB) inline requests, both forms (the
    synchronous one travels in chunks, ``execute_1_3`` as one message)."""
    x = np.ones((1, (RECEIVE_CAP - MiB) // 4), np.float32)
    model, request = relu_chain(1, x.shape), one_io_request(x)
    done = threading.Event()

    def attack() -> None:
        try:
            with Device.connect(address, client_name="attacker") as dev, dev.prepare_model_sync(model) as pm:
                for k in range(4):
                    if k % 2:
                        cb = pm.execute_request_async(request, timeout=120)
                        cb.wait(120)
                        seen[cb.value.status.name if cb.value is not None else "no answer"] += 1
                    else:
                        seen[pm.execute_request(request, timeout=120).status.name] += 1
        except Exception as err:
            seen[type(err).__name__] += 1

    threads = [threading.Thread(target=attack) for _ in range(16)]
    for t in threads:
        t.start()
    out: list[list[ErrorStatus]] = []
    victim = threading.Thread(target=lambda: out.append(_spread_victim(address, done)))
    victim.start()
    for t in threads:
        t.join(300)
    done.set()
    victim.join(300)
    return out[0] if out else []


def _status_of_stream(call: Iterator[spb.ExecuteEvent]) -> str:
    try:
        events = list(call)
        if not events:
            return "no events"
        last = events[-1]
        return ErrorStatus(last.notify.status if last.HasField("notify") else last.launch.status).name
    except grpc.RpcError as err:
        return f"rpc {err.code().name}"


def unread(address: str, seen: Outcome, attackers: int = 12, calls: int = 40) -> list[ErrorStatus]:
    """Clients starting ``execute_1_3`` calls with 4 MiB results, never reading them."""
    x = np.ones((1, (4 * MiB) // 4), np.float32)
    devices, channels, pending = [], [], []
    try:
        for _ in range(attackers):
            dev = Device.connect(address, client_name="never-reads")
            devices.append(dev)
            pm = dev.prepare_model_sync(relu_chain(1, x.shape))
            msg, _ = execute_request(dev.remote.session_id, pm.handle, one_io_request(x), ExecutionOptions())
            channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
            channels.append(channel)
            stub = sgrpc.PreparedModelStub(channel)
            pending += [stub.execute_1_3(msg, timeout=120) for _ in range(calls)]
        statuses = _victim(address)
        time.sleep(2)
    finally:
        let_go(pending, channels, devices)
    seen["calls"] += len(pending)
    return statuses


def zero_window(address: str, seen: Outcome, hold_s: float = 60.0) -> list[ErrorStatus]:
    """A connection granting no window, 70 ``execute_1_3`` calls held ``hold_s``."""
    host, port = address.rsplit(":", 1)
    with Device.connect(address, client_name="attacker") as attacker, prepared_small(attacker) as apm:
        msg, _ = execute_request(attacker.remote.session_id, apm.handle, one_io_request(ones()), ExecutionOptions())
        raw = ZeroWindowClient(host, int(port))
        try:
            for _ in range(70):
                raw.start(EXECUTE_1_3, msg.SerializeToString())
            statuses: list[ErrorStatus] = []
            end = time.monotonic() + hold_s
            with Device.connect(address, client_name="victim") as victim, prepared_small(victim) as vpm:
                while time.monotonic() < end:
                    raw.pump(0.5)
                    statuses += victim_runs(vpm, 4)
            seen[f"ended by the server: {len(raw.ended)}"] += 1
        finally:
            raw.close()
    return statuses


def _idle(stop: threading.Event) -> Iterator[spb.BurstRequest]:
    stop.wait(300)
    yield from ()


def mass(address: str, seen: Outcome, sessions: int = 50, calls: int = 8) -> list[ErrorStatus]:
    """One process, ``sessions`` plaintext sessions each holding never-read streams and idle bursts."""
    x = np.ones((1, MiB // 4), np.float32)
    devices, channels, pending = [], [], []
    stop = threading.Event()
    try:
        for _ in range(sessions):
            dev = Device.connect(address, client_name="mass")
            devices.append(dev)
            try:
                pm = dev.prepare_model_sync(relu_chain(1, x.shape))
            except Exception as err:
                seen[f"attacker prepare: {type(err).__name__}"] += 1
                continue
            msg, _ = execute_request(dev.remote.session_id, pm.handle, one_io_request(x), ExecutionOptions())
            channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
            channels.append(channel)
            stub = sgrpc.PreparedModelStub(channel)
            pending += [stub.configureExecutionBurst(_idle(stop), timeout=300) for _ in range(16)]
            pending += [stub.execute_1_3(msg, timeout=300) for _ in range(calls)]
        time.sleep(2)
        seen[f"long calls held: {devices[0].stats()['long_calls']}"] += 1
        return _victim(address)
    finally:
        stop.set()
        let_go(pending, channels, devices)


def _flood_unread(link: FastBurstLink, payload: bytes, seconds: float = 20.0) -> tuple[int, float]:
    """Request packets on ``link``'s queue, answers never read, until the server takes no more
    (it ended the queue); how many were sent and the seconds that took."""
    sent = full = 0
    t0 = time.monotonic()
    while full < 50 and time.monotonic() < t0 + seconds:
        try:
            link.requests.write(samehost.METHOD, payload)
            sent, full = sent + 1, 0
            link.doorbell.ring()
        except (fastring.RingError, OSError):
            full += 1
            time.sleep(0.01)
    return sent, time.monotonic() - t0


def silent_queue(address: str, seen: Outcome, attackers: int = 8) -> list[ErrorStatus]:
    """Same-host queues whose clients send executions and never read an answer: each queue
    must end within its bound, and the server's execution count stop growing."""
    done = threading.Event()
    out: list[list[ErrorStatus]] = []
    victim = threading.Thread(target=lambda: out.append(_spread_victim(address, done)))
    victim.start()
    devices, links = [], []
    try:
        ends: list[float] = []
        for _ in range(attackers):
            dev = Device.connect(address, client_name="silent")
            devices.append(dev)
            pm = dev.prepare_model_sync(relu_chain(1, (2, 4)))
            link = FastBurstLink.open(dev.remote, "", ring_bytes=fastring.MIN_RING_BYTES, executions=True)
            links.append(link)
            msg = spb.ExecuteRequest(session=dev.remote.session_id, prepared_model=pm.handle)
            wire_request.request_to(one_io_request(ones()), msg.request)
            sent, took = _flood_unread(link, samehost.encode_method(1, "", msg.SerializeToString()))
            seen["packets sent"] += sent
            ends.append(took)
        seen[f"slowest queue ended after {max(ends):.1f} s"] += 1
        done.set()
        victim.join(300)
        with Device.connect(address, client_name="observer") as observer:
            before = observer.stats()["executions"]
            time.sleep(3)
            seen[f"executions in the 3 s after: {observer.stats()['executions'] - before}"] += 1
    finally:
        done.set()
        for link in links:
            link.close()
        for dev in devices:
            dev.close()
    return out[0] if out else []


ATTACKS: dict[str, Callable[[str, Outcome], list[ErrorStatus]]] = {
    "inline": inline,
    "unread": unread,
    "zero-window": zero_window,
    "mass": mass,
    "silent-queue": silent_queue,
}


#: After release, RSS within this much of its start (issue #24's acceptance).
RELEASED_WITHIN = 64 * MiB
#: Small executions the victim must have had, all NONE.
VICTIM_CALLS = 200


def run(name: str, address_space: int | None) -> bool:
    """One attack; prints its line and whether its figures are within #24's bounds."""
    with Server(*LIMITS, address_space=address_space) as srv:
        time.sleep(1)
        peak = PeakRss(srv.pid)
        start = peak.peak
        seen: Outcome = collections.Counter()
        statuses = ATTACKS[name](srv.address, seen)
        top = peak.stop()
        time.sleep(3)  # the release's trim is rate-limited
        after = rss_bytes(srv.pid)
        log = srv.log()
    counts = collections.Counter(s.name for s in statuses)
    failures = log.count("GENERAL_FAILURE") + sum(n for k, n in seen.items() if "GENERAL" in k)
    print(
        f"{name}: peak RSS {top / MiB:.0f} MiB (start {start / MiB:.0f}, after release {after / MiB:.0f}); "
        f"victim {dict(counts)}; attackers {dict(seen)}; GENERAL_FAILURE in log/attackers {failures}",
        flush=True,
    )
    over = [
        *(
            [f"peak {(top - start) / MiB:.0f} MiB over start > {(TOTAL + MARGIN) / MiB:.0f}"]
            if top - start > TOTAL + MARGIN
            else []
        ),
        *(
            [f"after release {(after - start) / MiB:.0f} MiB over start > 64"]
            if after - start > RELEASED_WITHIN
            else []
        ),
        *([f"victim {dict(counts)}"] if counts.get("NONE", 0) < VICTIM_CALLS or len(counts) > 1 else []),
        *([f"GENERAL_FAILURE {failures}"] if failures else []),
    ]
    print(f"{name}: {'OVER: ' + '; '.join(over) if over else 'within bounds'}", flush=True)
    return not over


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attack", choices=[*ATTACKS, "all"])
    parser.add_argument("--as", dest="address_space", type=int, default=None)
    args = parser.parse_args()
    verdicts = [run(name, args.address_space) for name in (ATTACKS if args.attack == "all" else [args.attack])]
    if not all(verdicts):
        sys.exit(1)


if __name__ == "__main__":
    main()
