"""How the command line refuses bad input: one line ``nnhal: error: <what, and what to do>``
on stderr and exit status 2, never a traceback.

``UsageError`` is what a command raises for input it cannot act on; ``main`` prints it.
``Parser`` gives argparse's own errors the same one-line form. The value checkers here
raise ``ValueError`` with a message that reads after the name of the value's source
(``--slots -1: must be ...``, ``NNHAL_SLOTS=-1: must be ...``); ``for_argparse`` adapts
one into an argparse ``type=``.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import re
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")

EXIT_USAGE = 2


class UsageError(Exception):
    """Input the command cannot act on; the message says what is wrong and what to do."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``nnhal: error: ...``), exit status 2.

    Abbreviated long options are rejected (``allow_abbrev=False``): a prefix that happens to
    match today could silently mean another option once a new one is added.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._words: list[str] = []

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._words = [str(w) for w in (sys.argv[1:] if args is None else args)]
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        # argparse checks for a missing COMMAND before it reports options it did not know, so
        # `nnhal --bogus` would blame the missing command; name the unknown option instead.
        if message.startswith("the following arguments are required"):
            unknown = self._leading_unknown_option()
            if unknown is not None:
                message = f"unrecognized arguments: {unknown}"
        fail(f"{message} (see '{self.prog} --help')")

    def _leading_unknown_option(self) -> str | None:
        """The first option before the first positional word that this parser does not know."""
        for word in self._words:
            if word == "--" or not word.startswith("-"):
                return None
            if word.split("=", 1)[0] not in self._option_string_actions:
                return word
        return None


def report(message: str) -> int:
    """Print ``nnhal: error: <message>`` as one line on stderr; the exit status to return (2)."""
    one_line = " ".join(message.split())
    sys.stderr.write(f"nnhal: error: {one_line}\n")
    sys.stderr.flush()
    return EXIT_USAGE


def fail(message: str) -> NoReturn:
    """``report`` the message and exit with status 2."""
    raise SystemExit(report(message))


def for_argparse(check: Callable[[str], T]) -> Callable[[str], T]:
    """``check`` as an argparse ``type=``: its ValueError message becomes the argparse error."""

    def parse(text: str) -> T:
        try:
            return check(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = getattr(check, "__name__", "value")
    return parse


# -- numbers ---------------------------------------------------------------------------
def whole(text: str, minimum: int, zero_means: str = "") -> int:
    """An integer >= ``minimum``; ``zero_means`` (e.g. "unlimited") is said in the message."""
    try:
        value = int(text.strip().replace("_", ""), 10)
    except ValueError:
        value = None
    if value is None or value < minimum:
        why = f"must be a whole number >= {minimum}"
        if zero_means:
            why += f" (0 means {zero_means})"
        raise ValueError(f"{why}, got {text!r}")
    return value


#: Size units: binary (KiB, K) and decimal (KB); case does not matter, a trailing "B" is optional.
SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 1000,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 1000**2,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 1000**3,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 1000**4,
}
_SIZE = re.compile(r"\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")
#: Sizes beyond this are refused: no byte count above 2^63 - 1 means anything here.
MAX_SIZE = (1 << 63) - 1


def size(text: str, minimum: int = 0, zero_means: str = "") -> int:
    """A byte count >= ``minimum``: a whole number, or a number with a unit (``256MiB``,
    ``1.5G``, ``64kb``; :data:`SIZE_UNITS`). ``zero_means`` (e.g. "unlimited") is said in the message."""
    match = _SIZE.fullmatch(text)
    unit = SIZE_UNITS.get(match.group(2).lower()) if match else None
    value = None
    if match and unit is not None:
        number = match.group(1).replace("_", "")
        value = int(number) * unit if "." not in number else int(float(number) * unit)
    if value is None or value < minimum or value > MAX_SIZE:
        why = f"must be a size >= {minimum} bytes (a whole number, or with a unit: 256MiB, 1GiB, 64KB)"
        if zero_means:
            why += f" (0 means {zero_means})"
        raise ValueError(f"{why}, got {text!r}")
    return value


def seconds(text: str, minimum: float = 0.0) -> float:
    """A finite number of seconds >= ``minimum``."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value >= minimum or value == float("inf"):
        raise ValueError(f"must be a number of seconds >= {minimum:g}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return whole(text, 1)


def output_file(text: str) -> Path:
    """A file to write at the end of a run; its folder must exist now, not after the run."""
    path = Path(text)
    if path.is_dir():
        raise ValueError(f"{text!r} is a folder; name a file")
    if not path.parent.is_dir():
        raise ValueError(f"the folder of {text!r} does not exist; create it or choose another path")
    return path


# -- addresses ---------------------------------------------------------------------------
def _port(text: str, addr: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise ValueError(f"{addr!r}: the port must be a number from 0 to 65535 (0 picks a free one)")
    return int(text)


def split_host_port(addr: str, unix: bool = True) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` as (host, port); ValueError saying the expected form
    (``unix``: unix:PATH is one of the forms the caller accepts)."""
    form = "expected host:port, [IPv6]:port or unix:PATH" if unix else "expected host:port or [IPv6]:port"
    scheme, slashes, rest = addr.partition("://")
    if slashes and scheme and "/" not in scheme:
        # A URL (http://host:port) is a common guess; gRPC addresses carry no scheme.
        raise ValueError(f"{addr!r}: {form}, without a URL scheme (e.g. {rest.rstrip('/') or 'host:port'})")
    if addr.startswith("["):
        host, sep, port = addr[1:].partition("]:")
        if not sep or not host:
            raise ValueError(f"{addr!r}: {form}")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{addr!r}: {host!r} is not an IPv6 address") from None
        return host, _port(port, addr)
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port:
        raise ValueError(f"{addr!r}: {form} (the port is missing)" if not sep or not port else f"{addr!r}: {form}")
    if ":" in host:
        raise ValueError(f"{addr!r}: write an IPv6 address in brackets, e.g. [::1]:50051")
    if any(c.isspace() for c in host):
        raise ValueError(f"{addr!r}: the host name contains a space")
    return host, _port(port, addr)


def unix_path(addr: str) -> Path:
    """The socket path of ``unix:PATH`` (``unix:///abs`` too)."""
    rest = addr[len("unix:") :]
    if rest.startswith("//"):
        rest = rest[2:]
    return Path(rest)


def _probe_unix_bind(addr: str, path: Path) -> None:
    """Raise ValueError unless a unix socket can be created at ``path`` (then removed again).

    gRPC would otherwise log its own bind failure (``add_port.cc``) on stderr before ours.
    """
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.bind(str(path))
    except OSError as err:
        raise ValueError(
            f"{addr!r}: cannot create a socket at {path} ({err.strerror or err}); choose another path"
        ) from None
    else:
        path.unlink(missing_ok=True)
    finally:
        probe.close()


def server_address(addr: str) -> str:
    """A listen address: host:port (0..65535), [v6]:port, or unix:PATH whose folder exists."""
    addr = addr.strip()
    if addr.startswith("unix:"):
        path = unix_path(addr)
        if not path.name:
            raise ValueError(f"{addr!r}: name the socket file, e.g. unix:/tmp/nnhal.sock")
        if not path.parent.is_dir():
            raise ValueError(f"{addr!r}: the folder {path.parent} does not exist; create it or choose another path")
        if path.exists() and not path.is_socket():
            raise ValueError(f"{addr!r}: {path} exists and is not a socket; choose another path")
        if not path.exists():
            _probe_unix_bind(addr, path)
        return addr
    split_host_port(addr)
    return addr


def client_address(addr: str) -> str:
    """A server's address as a client names it: host:port, [v6]:port or unix:PATH."""
    addr = addr.strip()
    if addr.startswith("unix:"):
        if not unix_path(addr).name:
            raise ValueError(f"{addr!r}: name the socket file, e.g. unix:/tmp/nnhal.sock")
        return addr
    split_host_port(addr)
    return addr


def check_bindable(addr: str, flag: str = "--listen") -> None:
    """Raise UsageError if ``addr`` (host:port, already validated) cannot be bound now: the
    port is in use, the host does not resolve or is not an address of this machine.

    gRPC reports these only as "Failed to bind" after logging to stderr itself, so the
    common cases are tried first with a plain socket (SO_REUSEADDR, as gRPC binds)."""
    if addr.startswith("unix:"):
        return
    host, port = split_host_port(addr)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise UsageError(f"{flag} {addr}: the host {host!r} does not resolve ({err.strerror})") from None
    for family, kind, proto, _name, sockaddr in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(sockaddr)
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    raise UsageError(
                        f"{flag} {addr}: port {port} is already in use; stop what holds it or choose another port "
                        "(port 0 picks a free one)"
                    ) from None
                if err.errno == errno.EAFNOSUPPORT:
                    continue
                raise UsageError(f"{flag} {addr}: cannot listen there ({err.strerror})") from None
