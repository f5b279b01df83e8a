"""``nnhal import`` and ``nnhal run MODEL``: saving, running through a server with inputs from
files, saving outputs, comparing with LiteRT; bad files and bad arguments are one line each."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from nnhal.cli.main import build_parser, main
from nnhal.cli.model_run import output_file_name, split_targets
from nnhal.cli.usage import UsageError
from nnhal.importers import litert
from nnhal.models import FACE_DETECTION, tflite_model
from nnhal.testing.local_server import LocalServer

MODELS = tflite_model(FACE_DETECTION).parent
SHORT_RANGE = MODELS / "face_detection_short_range.tflite"


def _one_error_line(capfd: pytest.CaptureFixture[str], argv: list[str], expect: str) -> None:
    assert main(argv) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nnhal: error: ") and expect in err[0], err


def test_output_file_names_are_sanitised() -> None:
    assert output_file_name("model_1/conv 2:0") == "model_1_conv_2_0.npy"
    assert output_file_name("Identity.1-a") == "Identity.1-a.npy"


def test_positional_words() -> None:
    default = "127.0.0.1:50051"
    assert split_targets(default, None, default) == (default, None)
    assert split_targets(str(SHORT_RANGE), None, default) == (default, SHORT_RANGE)
    assert split_targets("unix:/tmp/s", "m.tflite", default) == ("unix:/tmp/s", Path("m.tflite"))
    with pytest.raises(UsageError, match="two models"):
        split_targets("a.tflite", "b.tflite", default)
    args = build_parser().parse_args(["run", "--start", "m.tflite", "--input", "a.npy", "b.npy", "--seed", "3"])
    assert (args.address, args.model, args.input, args.seed) == ("m.tflite", None, [Path("a.npy"), Path("b.npy")], 3)


def test_import_saves_a_model_that_runs(server: LocalServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "m.nnhal"
    assert main(["import", str(SHORT_RANGE), "-o", str(saved)]) == 0
    out = capfd.readouterr().out
    assert "164 TFLite operators -> 90 NNAPI operations" in out and f"saved {saved}" in out
    image = np.random.default_rng(1).random((1, 128, 128, 3), dtype=np.float32)
    np.save(tmp_path / "x.npy", image)
    outs = tmp_path / "outs"
    argv = ["run", server.address, str(saved), "--input", str(tmp_path / "x.npy"), "--save-outputs", str(outs)]
    assert main(argv) == 0
    out = capfd.readouterr().out
    assert "regressors" in out and "CONV_2D" in out and "DEPTHWISE_CONV_2D" in out  # outputs and profile
    assert np.load(outs / "regressors.npy").shape == (1, 896, 16)
    assert np.load(outs / "classificators.npy").shape == (1, 896, 1)


@pytest.mark.skipif(not litert.available(), reason="LiteRT (ai-edge-litert, the 'tflite' extra) is not installed")
def test_run_compare(server: LocalServer, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["run", server.address, str(SHORT_RANGE), "--compare", "--repeat", "1", "--seed", "2"]) == 0
    out = capfd.readouterr().out
    assert "max abs diff" in out and "LiteRT (XNNPACK, 1 thread)" in out and "ratio" in out
    assert out.count(" yes") >= 2


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (b"", "too short to be a TFLite flatbuffer"),
        (b"hello world, not a model", "not a TFLite model"),
        (None, "truncated or corrupt flatbuffer"),
    ],
    ids=["empty", "text", "truncated"],
)
def test_bad_files_are_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], content: bytes | None, expect: str
) -> None:
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(SHORT_RANGE.read_bytes()[:50_000] if content is None else content)
    _one_error_line(capfd, ["import", str(bad), "-o", str(tmp_path / "x.nnhal")], expect)
    _one_error_line(capfd, ["run", "127.0.0.1:1", str(bad)], expect)  # fails before connecting


def test_bad_arguments_are_one_line(server: LocalServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    _one_error_line(capfd, ["import", str(tmp_path / "none.tflite"), "-o", str(tmp_path / "x")], "no such model file")
    _one_error_line(capfd, ["run", server.address, "--compare"], "--compare need a MODEL")
    np.save(tmp_path / "small.npy", np.zeros((1, 4), np.float32))
    argv = ["run", server.address, str(SHORT_RANGE), "--input", str(tmp_path / "small.npy")]
    _one_error_line(capfd, argv, "shape [1, 4], input 'input' needs [1, 128, 128, 3]")
    argv = [
        "run",
        server.address,
        str(SHORT_RANGE),
        "--input",
        str(tmp_path / "small.npy"),
        str(tmp_path / "small.npy"),
    ]
    _one_error_line(capfd, argv, "the model has 1 input(s) (input); 2 --input file(s) given")


def test_run_on_a_named_device_and_across_a_partition(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    with LocalServer("--device", "cpu", "--device", "litert", "--device", "ort:strict") as srv:
        argv = ["run", srv.address, str(SHORT_RANGE), "--device", "litert", "--compare", "--repeat", "1"]
        assert main(argv) == 0
        out = capfd.readouterr().out
        assert "prepared on litert" in out and out.count(" yes") >= 2
        assert re.search(r"^litert\s+90\s", out, re.M)  # the profile: every operation on LiteRT
        assert main(["run", srv.address, str(SHORT_RANGE), "--partition", "ort,cpu", "--compare", "--repeat", "1"]) == 0
        out = capfd.readouterr().out
        assert "prepared across ort, cpu" in out and out.count(" yes") >= 2
        # An operation the strict ort device lacks (L2_POOL_2D) runs on the CPU device, within tolerance.
        lacking = tmp_path / "conv_l2pool_conv.tflite"
        lacking.write_bytes(_conv_l2pool_conv())
        assert main(["run", srv.address, str(lacking), "--partition", "ort,cpu", "--compare", "--repeat", "1"]) == 0
        out = capfd.readouterr().out
        assert re.search(r"^ort\s+2$", out, re.M) and re.search(r"^cpu\s+1$", out, re.M) and " yes" in out


def _conv_l2pool_conv() -> bytes:
    """CONV_2D → L2_POOL_2D → CONV_2D as a .tflite (written by the litert device's compiler)."""
    from nnhal.client.builder import ModelBuilder
    from nnhal.core.enums import OperandType as T, OperationType as O
    from nnhal.core.types import InlinePool
    from nnhal.server.litert.compiler import compile_model

    f32, rng, b = T.TENSOR_FLOAT32, np.random.default_rng(0), ModelBuilder()
    x = b.input(f32, (1, 16, 16, 3))
    w = b.constant(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    c = b.op(
        O.CONV_2D,
        [x, w, b.constant(rng.standard_normal(8).astype(np.float32)), *b.ints(1, 1, 1, 1)],
        f32,
        (1, 16, 16, 8),
    )
    p = b.op(O.L2_POOL_2D, [c, *b.ints(2, 2, 2, 2, 2, 0)], f32, (1, 8, 8, 8))
    w2 = b.constant(rng.standard_normal((4, 1, 1, 8)).astype(np.float32))
    o = b.op(
        O.CONV_2D,
        [p, w2, b.constant(rng.standard_normal(4).astype(np.float32)), *b.ints(1, 1, 1, 0)],
        f32,
        (1, 8, 8, 4),
    )
    model = b.outputs(o).finish()
    return compile_model(model, [pool.data for pool in model.pools if isinstance(pool, InlinePool)])


def test_device_and_partition_errors_are_one_line(capfd: pytest.CaptureFixture[str]) -> None:
    model = str(SHORT_RANGE)
    _one_error_line(capfd, ["run", "--start", model, "--device", "gpu"], "kind must be one of")
    _one_error_line(capfd, ["run", "--start", model, "--device", "cpu", "--partition", "ort,cpu"], "not both")
    _one_error_line(capfd, ["run", "--start", model, "--partition", ","], "--partition needs device names")


@pytest.mark.parametrize(
    ("shape", "expect"),
    [
        ((1, -5, 4, 3), "dimension 1 of -5: dimensions must be positive"),
        ((1, 0, 4, 3), "dimension 1 of 0: dimensions must be positive (NNAPI reads 0 as unknown)"),
        ((1, 2_000_000_000, 192, 3), "spans 4,608,000,000,000 bytes, beyond the 4,294,967,295"),
    ],
    ids=["negative", "zero", "huge"],
)
def test_absurd_dimensions_are_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], shape: tuple[int, ...], expect: str
) -> None:
    from tests.importers.tflite_writer import Op, Tensor, write_model

    bad = tmp_path / "bad.tflite"
    bad.write_bytes(write_model([Tensor("x", shape), Tensor("y", shape)], [Op("RELU", [0], [1])], [0], [1]))
    _one_error_line(capfd, ["import", str(bad), "-o", str(tmp_path / "x.nnhal")], expect)
    _one_error_line(capfd, ["run", "127.0.0.1:1", str(bad)], expect)  # refused before connecting or allocating


def test_size_flags_take_units() -> None:
    from nnhal.cli import config

    args = build_parser().parse_args(["serve", "--memory-total", "256MiB", "--memory-per-client", "1.5G"])
    resolved = config.resolve(args, {})
    assert resolved["memory_total"] == 256 << 20 and resolved["memory_per_client"] == 3 << 29
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--memory-total", "-5MiB"])
