"""The mTLS overlay (deploy/kubernetes/tls): the patched Deployment passes the schema
validator, its probes target the plaintext health-only port, and its flags serve mTLS on
the device port and plaintext health on the other (run on loopback, certificates made at
test time)."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kubernetes_validate import utils as kv

from nnhal.cli.main import build_parser
from nnhal.client.device import Device
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model
from tests.integration.test_tls import Pki, pki  # noqa: F401  (the module-scoped PKI fixture)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def _patched() -> dict[str, Any]:
    """The base Deployment with the overlay's JSON 6902 operations applied (add / replace)."""
    (kustomization,) = yaml.safe_load_all((DEPLOY / "tls" / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../"]
    (patch,) = kustomization["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": "nnhal"}
    (doc,) = [d for d in yaml.safe_load_all((DEPLOY / "deployment.yaml").read_text()) if d]
    doc = copy.deepcopy(doc)
    for op in yaml.safe_load((DEPLOY / "tls" / patch["path"]).read_text()):
        *parents, last = op["path"].lstrip("/").split("/")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if op["op"] == "add" and last == "-":
            node.append(op["value"])
        elif op["op"] == "replace":
            key = int(last) if isinstance(node, list) else last
            assert key in node if isinstance(node, dict) else key < len(node), op["path"]
            node[key] = op["value"]
        else:
            pytest.fail(f"unexpected operation {op}")
    return dict(doc)


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc["spec"]["template"]["spec"]["containers"][0])


def _args(doc: dict[str, Any]) -> list[str]:
    env = {e["name"]: e["value"] for e in _container(doc)["env"]}
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], a) for a in _container(doc)["args"]]


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_the_overlay_passes_the_schema_validator_and_probes_the_health_port() -> None:
    doc = _patched()
    kv.validate(doc, sorted(kv.all_versions())[-1], strict=True)
    container = _container(doc)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = _args(doc)
    assert _option(args, "--health-listen") == f"0.0.0.0:{ports['health']}"
    assert _option(args, "--listen") == f"0.0.0.0:{ports['grpc']}"
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[kind]["grpc"]["port"] == ports["health"], kind
    mounted = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    for flag in ("--tls-cert", "--tls-key", "--tls-client-ca"):
        assert _option(args, flag).startswith(mounted["tls"] + "/"), flag
    tls = next(v for v in doc["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    assert tls["secret"]["optional"] is False
    assert build_parser().parse_args(["serve", *args]).command == "serve"


def _check(address: str) -> str:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def test_the_overlays_flags_serve_mtls_and_plaintext_health(pki: Pki, tmp_path: Path) -> None:  # noqa: F811
    secret = tmp_path / "cache-secret"
    secret.write_bytes(os.urandom(32))
    args = _args(_patched())
    # The pod's flags on loopback, with this test's certificates and secret file.
    for name in ("--listen", "--cache-secret-file", "--tls-cert", "--tls-key", "--tls-client-ca", "--health-listen"):
        i = args.index(name)
        del args[i : i + 2]
    extra = (*pki.mtls_args(), "--cache-secret-file", str(secret), "--health-listen", "127.0.0.1:0")
    with LocalServer(*args, *extra) as srv:
        health = Path(str(srv.port_file) + ".health").read_text().strip()
        assert _check(health) == "SERVING"
        with Device.connect(srv.address, tls=pki.client(pki.a)) as dev, dev.prepare_model_sync(add_model()):
            pass
        # The image's probe, pointed at the health-only listener: plaintext whatever NNHAL_TLS_* say.
        env = {k: v for k, v in os.environ.items() if not k.startswith("NNHAL_")}
        env |= {"NNHAL_HEALTH_LISTEN": health, "NNHAL_TLS_CA": str(tmp_path / "missing.crt")}
        done = subprocess.run(
            [sys.executable, "-m", "nnhal.tools.healthcheck"], capture_output=True, text=True, timeout=30, env=env
        )
        assert (done.returncode, done.stdout.strip()) == (0, "serving"), done.stderr
