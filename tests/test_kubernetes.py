"""The Kubernetes manifests in deploy/kubernetes, checked without a cluster: every
resource against the Kubernetes JSON schemas (kubernetes-validate ships them, so
this runs offline), then what the schemas cannot say: the pod runs as the image's
non-root user on a read-only root filesystem, writes only to volumes, probes
grpc.health.v1 on the container port for services the server registers, outlives
the drain, the Services select its pods, no secret value is committed, and its
command is one `nnhal serve` accepts and serves with (on loopback)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as kv

from nnhal.cli.main import build_parser
from nnhal.server.rpc.serve import SERVICE_NAMES
from nnhal.testing.local_server import LocalServer

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "kubernetes"
#: The oldest Kubernetes the manifests claim (native gRPC probes are GA from 1.27).
MIN_KUBERNETES = "1.27"
#: The server's drain when --drain-seconds is not given (issue #12).
DEFAULT_DRAIN_S = 10.0

Resource = dict[str, Any]


def _load(path: Path) -> list[Resource]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _resources() -> list[tuple[Path, Resource]]:
    return [
        (path, doc) for path in sorted(DEPLOY.glob("*.yaml")) for doc in _load(path) if doc["kind"] != "Kustomization"
    ]


def _one(kind: str, name: str | None = None) -> Resource:
    found = [doc for _, doc in _resources() if doc["kind"] == kind and name in (None, doc["metadata"]["name"])]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def _pod() -> Resource:
    return dict(_one("Deployment")["spec"]["template"])


def _container() -> Resource:
    containers = _pod()["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def _args(**overrides: str) -> list[str]:
    """The container's args with $(VAR) expanded from its env, as the kubelet does."""
    env = {e["name"]: e["value"] for e in _container().get("env", [])} | overrides
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], arg) for arg in _container()["args"]]


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _schema_versions() -> list[str]:
    shipped = sorted({kv.major_minor(v) for v in kv.all_versions()}, key=lambda v: tuple(map(int, v.split("."))))
    oldest = [v for v in shipped if tuple(map(int, v.split("."))) >= tuple(map(int, MIN_KUBERNETES.split(".")))]
    return sorted({oldest[0], shipped[-1]})


@pytest.mark.parametrize("version", _schema_versions())
def test_every_manifest_passes_the_schema_validator(version: str) -> None:
    resources = _resources()
    assert {doc["kind"] for _, doc in resources} >= {"Deployment", "Service", "Secret", "PodDisruptionBudget"}
    for path, doc in resources:
        # strict: an unknown (e.g. misspelt) field is an error, not silently dropped.
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as err:
            where = ".".join(str(p) for p in err.path)
            pytest.fail(f"{path.name}: {doc['kind']}/{doc['metadata']['name']} at {where}: {err.message}")


def test_the_validator_rejects_a_broken_manifest() -> None:
    deployment = _one("Deployment")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, _schema_versions()[-1], strict=True)


def test_kustomization_lists_every_manifest_but_the_secrets() -> None:
    (kustomization,) = _load(DEPLOY / "kustomization.yaml")
    listed = set(kustomization["resources"])
    assert all((DEPLOY / name).is_file() for name in listed)
    files = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    secrets = {p.name for p in DEPLOY.glob("*.yaml") if any(d["kind"] == "Secret" for d in _load(p))}
    assert secrets and listed == files - secrets
    image = _container()["image"].split(":")[0]
    assert [i["name"] for i in kustomization["images"]] == [image]


def test_pod_runs_as_the_images_non_root_user_on_a_read_only_root() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    uid = re.search(r"--uid (\d+)", dockerfile)
    assert uid is not None
    pod = _pod()["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == int(uid[1])
    assert pod["securityContext"]["fsGroup"] == int(uid[1])
    assert pod["automountServiceAccountToken"] is False
    # Service links would inject NNHAL_PORT=tcp://... from the Service named nnhal.
    assert pod["enableServiceLinks"] is False
    sc = _container()["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    resources = _container()["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}


def test_server_writes_only_to_volumes_and_reads_secrets_from_secrets() -> None:
    volumes = {v["name"]: v for v in _pod()["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in _container()["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    args = _args()
    # Shared memory is off: clients in other pods cannot map this pod's /dev/shm.
    assert _option(args, "--shm-dir") == "none"
    secret_file = Path(_option(args, "--cache-secret-file"))
    mount = mounts[str(secret_file.parent)]
    assert mount["readOnly"] is True
    source = volumes[mount["name"]]["secret"]
    assert source["secretName"] == "nnhal-cache-secret" and not source.get("optional", False)
    assert {"key": "cache-secret", "path": secret_file.name} in source["items"]
    assert source["defaultMode"] == 0o440  # readable by fsGroup only
    tls = volumes[mounts["/etc/nnhal/tls"]["name"]]["secret"]
    assert tls["secretName"] == "nnhal-tls" and tls["optional"] is True
    # The Dockerfile keeps the secret at the same path, on its VOLUME.
    assert f"--cache-secret-file {secret_file}" in (ROOT / "Dockerfile").read_text()


def test_probes_are_grpc_health_on_the_container_port() -> None:
    container = _container()
    (port,) = container["ports"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert int(env["NNHAL_PORT"]) == port["containerPort"]
    assert _option(_args(), "--listen") == f"0.0.0.0:{port['containerPort']}"
    registered = {"", *SERVICE_NAMES}  # what serve.py's health servicer sets SERVING
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container[kind]
        assert set(probe) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"}, kind
        assert probe["grpc"]["port"] == port["containerPort"], kind
        assert probe["grpc"].get("service", "") in registered, kind
    liveness = container["livenessProbe"]
    # A draining server is NOT_SERVING; liveness must not restart it before the drain ends.
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > _drain_seconds()


def _drain_seconds() -> float:
    args = _args()
    return float(_option(args, "--drain-seconds")) if "--drain-seconds" in args else DEFAULT_DRAIN_S


def test_grace_period_outlasts_the_pre_stop_and_the_drain() -> None:
    pre_stop = _container()["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    grace = _pod()["spec"]["terminationGracePeriodSeconds"]
    assert grace > float(pre_stop[1]) + _drain_seconds()
    # No shell between the kubelet and nnhal: SIGTERM reaches the server.
    assert _container()["command"] == ["nnhal", "serve"]


def test_services_select_the_pods_and_the_headless_one_lists_replicas() -> None:
    labels = _pod()["metadata"]["labels"]
    deployment = _one("Deployment")
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert _one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= labels.items()
    port_names = {p["name"]: p["containerPort"] for p in _container()["ports"]}
    services = [doc for _, doc in _resources() if doc["kind"] == "Service"]
    assert len(services) == 2
    for svc in services:
        assert svc["spec"]["selector"].items() <= labels.items()
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in port_names or port["targetPort"] in port_names.values()
    assert _one("Service", "nnhal")["spec"]["type"] == "ClusterIP"
    headless = _one("Service", "nnhal-replicas")["spec"]
    assert headless["clusterIP"] == "None"
    assert headless.get("publishNotReadyAddresses", False) is False


def test_no_secret_values_in_the_repository() -> None:
    for path, doc in _resources():
        if doc["kind"] == "Secret":
            assert not doc.get("data") and not doc.get("stringData"), path.name
    for path in [*DEPLOY.rglob("*"), ROOT / "Dockerfile", ROOT / ".dockerignore"]:
        if path.is_file():
            text = path.read_text()
            assert "-----BEGIN" not in text and "PRIVATE KEY" not in text, path


def test_the_command_is_one_nnhal_serve_accepts() -> None:
    parsed = build_parser().parse_args(["serve", *_args()])
    assert parsed.command == "serve"


@pytest.mark.integration
def test_the_command_serves_on_loopback(tmp_path: Path) -> None:
    # The pod's flags, but on loopback and an ephemeral port, and the Secret's file in a
    # temporary folder (written as `kubectl create secret` would hold it: 32 bytes, read-only).
    secret = tmp_path / "cache-secret"
    secret.write_bytes(os.urandom(32))
    secret.chmod(0o440)
    args = _args()
    for name in ("--listen", "--cache-secret-file"):
        i = args.index(name)
        del args[i : i + 2]
    with LocalServer(*args, "--cache-secret-file", str(secret)) as srv:
        env = {k: v for k, v in os.environ.items() if k != "NNHAL_PORT"} | {"NNHAL_HEALTH_ADDRESS": srv.address}
        done = subprocess.run(
            [sys.executable, "-m", "nnhal.tools.healthcheck"], capture_output=True, text=True, timeout=30, env=env
        )
        assert (done.returncode, done.stdout.strip()) == (0, "serving"), done.stderr + srv.log()
