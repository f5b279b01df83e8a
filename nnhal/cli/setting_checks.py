"""What each ``nnhal serve`` setting's text may be: the checks the settings table
(:mod:`nnhal.cli.config`) names, one per kind of value. Each turns text — a flag, an
``NNHAL_*`` variable or a ``--config`` file value — into the value, or raises ValueError
saying what is allowed; the table adds where the text came from.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nnhal.cli.usage import server_address, split_host_port
from nnhal.core.enums import HalVersion
from nnhal.server.devices import parse_device

#: ``--feature-level`` values: the HIDL versions, then the AIDL versions by NNAPI feature level
#: (AIDL V1..V4 = 5..8). The default is the highest.
FEATURE_LEVELS: dict[str, HalVersion] = {
    "1.0": HalVersion.V1_0,
    "1.1": HalVersion.V1_1,
    "1.2": HalVersion.V1_2,
    "1.3": HalVersion.V1_3,
    "5": HalVersion.AIDL_V1,
    "6": HalVersion.AIDL_V2,
    "7": HalVersion.AIDL_V3,
    "8": HalVersion.AIDL_V4,
}
#: Other spellings of the AIDL levels, normalised to the level number.
_FEATURE_LEVEL_ALIASES = {f"aidl-v{n - 4}": str(n) for n in range(5, 9)}
DEFAULT_FEATURE_LEVEL = "8"
LOG_FORMATS = ("text", "json")


def choice(*allowed: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, got {text!r}")
        return text

    return check


def feature_level(text: str) -> str:
    """A ``--feature-level`` value, normalised (``aidl-v4`` -> ``8``); ValueError naming the choices."""
    level = _FEATURE_LEVEL_ALIASES.get(text.strip().lower(), text.strip())
    if level not in FEATURE_LEVELS:
        raise ValueError(
            f"must be one of {', '.join(FEATURE_LEVELS)} (HIDL 1.x, or the AIDL feature levels; "
            f"also aidl-v1..aidl-v4), got {text!r}"
        )
    return level


def switch(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"must be true or false, got {text!r}")


def fault_seed(text: str) -> int | str:
    """A seed (a whole number >= 0), or "" for none (as other settings say off)."""
    if not text.strip():
        return ""
    if not text.strip().isdigit():
        raise ValueError(f"must be a whole number >= 0 (or empty: no seeded faults), got {text!r}")
    return int(text.strip())


def fault_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"must be a share from 0 to 1, got {text!r}")
    return value


def name(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def metrics_address(text: str) -> str:
    """Off (""), or host:port / [IPv6]:port: the metrics are plain HTTP on TCP."""
    if not text.strip():
        return ""
    if text.strip().startswith("unix:"):
        raise ValueError(f"{text!r}: the metrics listener is HTTP on TCP; give host:port, e.g. 127.0.0.1:9464")
    split_host_port(text.strip(), unix=False)
    return text.strip()


def health_address(text: str) -> str:
    """Off (""), or host:port / unix:PATH of the plaintext health-only listener."""
    if not text.strip():
        return ""
    return server_address(text.strip())


def port_file(text: str) -> str:
    if text and not Path(text).parent.is_dir():
        raise ValueError(f"the folder of {text!r} does not exist; create it or choose another path")
    return text


def shm_dir(text: str) -> str:
    if text != "none" and not Path(text).is_dir():
        raise ValueError(f"{text!r} is not a folder; name an existing one (e.g. /dev/shm) or 'none' to disable")
    return text


def cache_secret_file(text: str) -> str:
    if text != "none" and Path(text).is_dir():
        raise ValueError(f"{text!r} is a folder; name a file (created if missing) or 'none' for a per-process key")
    return text


def record_dir(text: str) -> str:
    """Off (""), or a folder to record into (made if missing; its parent must exist)."""
    if not text.strip():
        return ""
    path = Path(text.strip())
    if path.exists() and not path.is_dir():
        raise ValueError(f"{text!r} is not a folder; name a folder to write the recordings into")
    if not path.exists() and not path.parent.is_dir():
        raise ValueError(f"the folder holding {text!r} does not exist; create it or choose another path")
    return str(path)


def device(text: str) -> str:
    parse_device(text)  # ValueError saying what is allowed
    return text.strip()


def tls_file(text: str) -> str:
    """Off (""), or a path; its contents are checked when the server's TLS is loaded."""
    if text.strip() and Path(text).is_dir():
        raise ValueError(f"{text!r} is a folder; name a PEM file")
    return text.strip()
