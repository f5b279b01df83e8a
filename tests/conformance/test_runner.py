"""The one conformance mode table: every mode described once, the CLI's views derived from it,
and every executor of ``nnhal.conformance.executors`` in it."""

from __future__ import annotations

import inspect

from nnhal.conformance import executors
from nnhal.conformance.runner import ALL_MODES, LEVEL_MODE, MODE_BY_NAME, MODE_TABLE, MODES
from nnhal.core.enums import HalVersion


def test_each_mode_is_one_entry_and_the_views_are_derived() -> None:
    names = [m.name for m in MODE_TABLE]
    assert len(names) == len(set(names)) and LEVEL_MODE not in names
    assert tuple(names) == ALL_MODES
    assert tuple(m.name for m in MODE_TABLE if m.default) == MODES
    assert set(ALL_MODES) - set(MODES) == {"validation"}  # long: only when asked for
    assert all(MODE_BY_NAME[n].name == n for n in names)


def test_every_executor_is_a_mode() -> None:
    runners = {name for name, fn in inspect.getmembers(executors, inspect.isfunction) if name.startswith("run_")}
    assert {f"run_{m}" for m in ("burst", "burst_fast", "fenced", "timing", "reusable", "config")} == runners
    assert set(MODES) >= {r.removeprefix("run_") for r in runners}


def test_levels_and_preparation() -> None:
    since = {m.name: m.since for m in MODE_TABLE}
    assert since["sync"] is None and since["dynamic"] == HalVersion.V1_2 and since["domain"] == HalVersion.V1_3
    assert since["fenced"] == HalVersion.V1_3 and since["burst"] == HalVersion.V1_2
    own = {m.name for m in MODE_TABLE if not m.prepared}
    assert own == {"dynamic", "quant_signed", "shared", "config", "validation"}
