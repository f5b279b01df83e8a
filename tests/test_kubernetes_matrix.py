"""The conformance-matrix overlay (deploy/kubernetes/conformance-matrix), checked without a
cluster: every resource (the Indexed Job, the ConfigMap its kustomization generates, the
reports claim, the merge pod) against the Kubernetes JSON schemas at the overlay's own
minimum version (1.33: per-index retries, native sidecars) and the newest shipped; then
what the schemas cannot say: the Job's indexes are the runner's shards, its server is a
sidecar on loopback that the runner targets, each cell of a 4 feature levels x 2 device
kinds matrix gives commands `nnhal serve` / `nnhal conformance` accept on vectors the
image holds; and, on loopback, the pod's two commands run a shard and the merge pod's
script merges what they wrote."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as kv

from nnhal.cli.main import build_parser
from nnhal.conformance.shards import INDEX_VARIABLE, Shard, parse_shard
from nnhal.testing.local_server import LocalServer

ROOT = Path(__file__).resolve().parents[1]
OVERLAY = ROOT / "deploy" / "kubernetes" / "conformance-matrix"
#: The oldest Kubernetes the overlay claims: backoffLimitPerIndex and sidecar containers are GA in 1.33.
MIN_KUBERNETES = "1.33"
#: The matrix docs/matrices.md shows.
LEVELS = ("1.2", "1.3", "7", "8")
KINDS = ("cpu", "ort")
#: Where the image keeps the project (Dockerfile WORKDIR).
IMAGE_ROOT = "/opt/nnhal"

Resource = dict[str, Any]


def _load(name: str) -> list[Resource]:
    return [doc for doc in yaml.safe_load_all((OVERLAY / name).read_text()) if doc]


def _kustomization() -> Resource:
    (doc,) = _load("kustomization.yaml")
    return dict(doc)


def _cell() -> dict[str, str]:
    (gen,) = _kustomization()["configMapGenerator"]
    return dict(item.split("=", 1) for item in gen["literals"])


def _config_map() -> Resource:
    (gen,) = _kustomization()["configMapGenerator"]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": _cell()}


def _job() -> Resource:
    (job,) = _load("job.yaml")
    return dict(job)


def _pod() -> Resource:
    return dict(_job()["spec"]["template"]["spec"])


def _server() -> Resource:
    (server,) = _pod()["initContainers"]
    return dict(server)


def _runner() -> Resource:
    (runner,) = _pod()["containers"]
    return dict(runner)


def _expanded(container: Resource, cell: dict[str, str], index: int) -> list[str]:
    """The container's args as the kubelet expands them, for ``cell`` and completion index ``index``."""
    env: dict[str, str] = {}
    for e in container.get("env", []):
        source = e.get("valueFrom", {})
        if "configMapKeyRef" in source:
            assert source["configMapKeyRef"]["name"] == _config_map()["metadata"]["name"]
            env[e["name"]] = cell[source["configMapKeyRef"]["key"]]
        elif "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            env[e["name"]] = str(index)
        else:
            env[e["name"]] = e["value"]
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], arg) for arg in container["args"]]


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _schema_versions() -> list[str]:
    def key(v: str) -> tuple[int, ...]:
        return tuple(map(int, v.split(".")))

    shipped = sorted({kv.major_minor(v) for v in kv.all_versions()}, key=key)
    oldest = [v for v in shipped if key(v) >= key(MIN_KUBERNETES)]
    return sorted({oldest[0], shipped[-1]}, key=key)


def _resources() -> list[tuple[str, Resource]]:
    files = ("job.yaml", "reports-pvc.yaml", "merge-pod.yaml")
    return [(name, doc) for name in files for doc in _load(name)] + [("kustomization.yaml", _config_map())]


@pytest.mark.parametrize("version", _schema_versions())
def test_every_resource_passes_the_schema_validator(version: str) -> None:
    assert _schema_versions()[0] == MIN_KUBERNETES
    for name, doc in _resources():
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as err:
            where = ".".join(str(p) for p in err.path)
            pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']} at {where}: {err.message}")


def test_the_validator_rejects_a_broken_job() -> None:
    broken = _job()
    broken["spec"]["backoffLimitPerIndx"] = 1
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, MIN_KUBERNETES, strict=True)


def test_the_overlay_stands_alone_and_lists_only_the_job() -> None:
    kustomization = _kustomization()
    # The claim is created once for every cell; the merge pod runs after the Jobs.
    assert kustomization["resources"] == ["job.yaml"]
    assert [i["name"] for i in kustomization["images"]] == [_runner()["image"].split(":")[0]]
    assert _server()["image"] == _runner()["image"]
    claim = _pod()["volumes"][-1]["persistentVolumeClaim"]["claimName"]
    (pvc,) = _load("reports-pvc.yaml")
    assert claim == pvc["metadata"]["name"] and "ReadWriteMany" in pvc["spec"]["accessModes"]
    (merge,) = _load("merge-pod.yaml")
    assert merge["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim


def test_indexes_are_the_runners_shards_with_per_index_retries() -> None:
    spec = _job()["spec"]
    assert spec["completionMode"] == "Indexed"
    shards = int(_cell()["shards"])
    assert spec["completions"] == shards and spec["parallelism"] <= shards
    assert spec["backoffLimitPerIndex"] >= 1 and "backoffLimit" not in spec
    assert _pod()["restartPolicy"] == "Never"
    rules = spec["podFailurePolicy"]["rules"]
    fail_index = next(r for r in rules if r["action"] == "FailIndex")
    # A shard's results (exit 1) and bad arguments (exit 2) are final; replaying changes nothing.
    assert fail_index["onExitCodes"] == {"containerName": _runner()["name"], "operator": "In", "values": [1, 2]}
    args = _expanded(_runner(), _cell(), 0)
    # N alone: the index comes from the variable the Job controller sets.
    assert _option(args, "--shard") == str(shards)
    assert parse_shard(_option(args, "--shard"), {INDEX_VARIABLE: str(shards - 1)}) == Shard(shards - 1, shards)


def test_the_server_is_a_sidecar_on_loopback_that_the_runner_targets() -> None:
    server, runner = _server(), _runner()
    assert server["restartPolicy"] == "Always"  # a native sidecar: started first, stopped after the runner
    args = _expanded(server, _cell(), 0)
    listen = _option(args, "--listen")
    assert listen.startswith("127.0.0.1:")
    assert _option(_expanded(runner, _cell(), 0), "--target") == listen
    probe = server["startupProbe"]["exec"]["command"]
    assert probe == ["python", "-m", "nnhal.tools.healthcheck", listen]
    pod = _pod()
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["automountServiceAccountToken"] is False
    uid = re.search(r"--uid (\d+)", (ROOT / "Dockerfile").read_text())
    assert uid is not None and pod["securityContext"]["runAsUser"] == int(uid[1])
    for container in (server, runner):
        sc = container["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
        assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/tmp", "/dev/shm"}


def test_the_image_holds_the_vectors_the_job_names() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert f"WORKDIR {IMAGE_ROOT}" in text
    assert re.search(r"^COPY conformance \./conformance$", text, re.M), "the image must contain the vectors"
    extras = re.search(r'pip install [^\n]*"\.\[([a-z,]+)\]"', text)
    assert extras is not None and "ort" in extras[1].split(","), "the ort device kind needs the ort extra in the image"
    vectors = Path(_expanded(_runner(), _cell(), 0)[0])
    assert vectors.is_relative_to(f"{IMAGE_ROOT}/conformance/vectors")
    assert (ROOT / vectors.relative_to(IMAGE_ROOT)).is_dir()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("level", LEVELS)
def test_each_cell_of_the_matrix_gives_commands_nnhal_accepts(level: str, kind: str, tmp_path: Path) -> None:
    cell = _cell() | {"feature-level": level, "device": kind}
    parser = build_parser()
    served = parser.parse_args(["serve", *_expanded(_server(), cell, 0)])
    assert (served.command, served.feature_level) == ("serve", level)
    reports: set[str] = set()
    for index in range(int(cell["shards"])):
        args = _expanded(_runner(), cell, index)
        # The reports volume is mounted in the pod; here a temporary folder stands for it.
        ran = parser.parse_args(["conformance", *(a.replace("/reports/", f"{tmp_path}/") for a in args)])
        assert ran.mode == [cell["mode"]]
        report = _option(args, "--report")
        assert level in report and kind in report and report.endswith(f".{index}-of-{cell['shards']}.json")
        reports.add(report)
    assert len(reports) == int(cell["shards"])  # no two shards (or cells) write one file


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_the_pods_commands_run_a_shard_on_loopback_and_the_merge_pod_merges(tmp_path: Path) -> None:
    """Both shards of a cell (two, on V1_0, a few cases) with the sidecar's flags and the
    runner's, loopback and paths moved into a temporary folder; then the merge pod's script."""
    cell = _cell() | {"vectors": "V1_0", "shards": "2", "feature-level": "1.3"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NNHAL_") and k != INDEX_VARIABLE}

    def local(arg: str) -> str:
        return arg.replace(f"{IMAGE_ROOT}/", f"{ROOT}/").replace("/reports/", f"{tmp_path}/")

    served = _expanded(_server(), cell, 0)
    for name in ("--listen", "--cache-secret-file"):
        i = served.index(name)
        del served[i : i + 2]
    with LocalServer(*served) as srv:
        for index in range(2):
            args = [local(a) for a in _expanded(_runner(), cell, index)]
            args[args.index("--target") + 1] = srv.address
            done = subprocess.run(
                [sys.executable, "-m", "nnhal", "conformance", *args, "-k", "add"],
                capture_output=True,
                text=True,
                timeout=120,
                env=clean | {INDEX_VARIABLE: str(index)},
            )
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (merge,) = _load("merge-pod.yaml")
    (container,) = merge["spec"]["containers"]
    assert container["command"] == ["sh", "-c"]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        ["sh", "-c", container["args"][0]],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean | {"REPORTS": str(tmp_path), "PATH": path},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    name = "V1_0-sync-1.3-cpu"
    assert f"== {name} (2 shards)" in done.stdout
    assert re.search(r"^\d+ passed, 0 failed, 0 skipped$", done.stdout, re.M), done.stdout
    assert (tmp_path / "merged" / f"{name}.json").is_file() and (tmp_path / "merged" / f"{name}.xml").is_file()
    # A missing shard report fails the merge (exit 2), it does not shrink the matrix.
    (tmp_path / f"{name}.1-of-2.json").unlink()
    again = subprocess.run(
        ["sh", "-c", container["args"][0]],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean | {"REPORTS": str(tmp_path), "PATH": path},
    )
    assert again.returncode == 2, again.stdout + again.stderr
    assert shlex.quote(name)  # the cell name is one shell word (no spaces)
