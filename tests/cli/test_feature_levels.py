"""``--feature-level`` (issue #13): HIDL 1.0-1.3 and the AIDL feature levels 5-8 (or aidl-v1..v4),
the highest by default; ``nnhal info`` names the level; the example extension's switch."""

from __future__ import annotations

import pytest

from nnhal.cli import build_parser, config
from nnhal.cli.info import _level
from nnhal.cli.serve import server_options
from nnhal.core.enums import HalVersion


def _resolved(*argv: str) -> config.Resolved:
    return config.resolve(build_parser().parse_args(["serve", "--cache-secret-file", "none", *argv]), environ={})


@pytest.mark.parametrize(
    ("given", "level"),
    [
        ((), HalVersion.AIDL_V4),
        (("--feature-level", "1.0"), HalVersion.V1_0),
        (("--feature-level", "1.3"), HalVersion.V1_3),
        (("--feature-level", "5"), HalVersion.AIDL_V1),
        (("--feature-level", "aidl-v3"), HalVersion.AIDL_V3),
        (("--feature-level", "AIDL-V2"), HalVersion.AIDL_V2),
    ],
)
def test_levels_and_the_default(given: tuple[str, ...], level: HalVersion) -> None:
    assert server_options(_resolved(*given)).device.feature_level == level


def test_an_unknown_level_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _resolved("--feature-level", "9")
    assert info.value.code == 2
    assert "must be one of 1.0, 1.1, 1.2, 1.3, 5, 6, 7, 8" in capsys.readouterr().err


def test_the_example_extension_switch() -> None:
    assert server_options(_resolved()).device.extensions == ()
    assert server_options(_resolved("--example-extension")).device.extensions == ("com.example.nnhal",)


def test_info_names_every_level() -> None:
    assert _level(13) == "NN HAL 1.3"
    assert _level(80) == "NN HAL AIDL V4 (feature level 8)"
    assert _level(50) == "NN HAL AIDL V1 (feature level 5)"
    assert _level(99) == "unknown (99)"
