"""``nnhal serve --device [NAME=]KIND``: parsed, named once each, from flags, env or file."""

from __future__ import annotations

import pytest

from nnhal.cli import build_parser, config
from nnhal.cli.usage import UsageError
from nnhal.server.devices import DeviceSpec, parse_device


def specs(argv: list[str], environ: dict[str, str] | None = None) -> list[DeviceSpec]:
    return config.device_specs(config.resolve(build_parser().parse_args(["serve", *argv]), environ or {}))


def test_no_device_flag_keeps_the_one_cpu_device() -> None:
    assert specs([]) == []


def test_kinds_and_names() -> None:
    assert specs(["--device", "cpu", "--device", "fast=ort"]) == [DeviceSpec("cpu", "cpu"), DeviceSpec("fast", "ort")]
    assert specs([], {"NNHAL_DEVICE": "ort,cpu"}) == [DeviceSpec("ort", "ort"), DeviceSpec("cpu", "cpu")]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gpu", "kind must be one of cpu, ort, litert"),
        ("cpu:strict", "compiling kinds"),
        ("a b=cpu", "letters, digits"),
        ("=", "kind"),
    ],
)
def test_bad_specs_say_what_is_allowed(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_device(text)


def test_a_name_given_twice_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="given twice"):
        specs(["--device", "cpu", "--device", "cpu"])
