"""docker-compose.yml: parsed and checked (no Docker engine here), plus `docker compose config` when available."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from gangscope import config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"


def _interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ${VAR:-default} / ${VAR} with an empty environment unless given."""
    env = env or {}
    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: _interpolate(str(v)) for k, v in env.items()}


def test_services_images_and_restart(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"kafka", "postgres", "gangscope"} <= set(services)
    assert re.fullmatch(r"apache/kafka:\d+\.\d+\.\d+", services["kafka"]["image"])  # official image, pinned
    assert re.fullmatch(r"postgres:\d+", services["postgres"]["image"])
    assert services["gangscope"]["build"]["dockerfile"] == "deploy/compose/Dockerfile"
    assert services["gangscope"]["command"] == ["run"]
    for name, svc in services.items():
        assert svc.get("restart") in ("unless-stopped", "always", "on-failure"), name


def test_kafka_is_single_node_kraft(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    env = _env(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node = env["KAFKA_NODE_ID"]
    voter_id, voter_addr = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split("@")
    assert voter_id == node
    listeners = dict(item.split("://") for item in env["KAFKA_LISTENERS"].split(","))
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners
    assert voter_addr.endswith(listeners["CONTROLLER"])  # the voter is this node's controller listener
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) <= set(protocols)
    assert len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16  # Kafka wants a base64 UUID
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"  # one broker
    # The broker's data lives on a named volume at its log dir.
    assert f"kafka-data:{env['KAFKA_LOG_DIRS']}" in kafka["volumes"]
    # gangscope's bootstrap is an advertised listener of the broker.
    advertised = [a.split("://")[1] for a in env["KAFKA_ADVERTISED_LISTENERS"].split(",")]
    assert _env(compose["services"]["gangscope"])["GANGSCOPE_KAFKA_BOOTSTRAP_SERVERS"] in advertised


def test_health_checks_and_start_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    kafka_check = " ".join(services["kafka"]["healthcheck"]["test"])
    assert "/opt/kafka/bin/kafka-broker-api-versions.sh" in kafka_check
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "/healthz" in " ".join(services["gangscope"]["healthcheck"]["test"])
    for name in ("gangscope", "pipeline"):
        deps = services[name]["depends_on"]
        assert deps == {"kafka": {"condition": "service_healthy"}, "postgres": {"condition": "service_healthy"}}


def test_catalog_url_matches_postgres(compose: dict[str, Any]) -> None:
    pg = _env(compose["services"]["postgres"])
    url = urlsplit(_env(compose["services"]["gangscope"])["GANGSCOPE_CATALOG"])
    assert url.scheme == "postgres" and url.hostname == "postgres" and url.port == 5432
    assert (url.username, url.password, url.path.lstrip("/")) == (
        pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"])
    assert any(v.startswith("pg-data:") for v in compose["services"]["postgres"]["volumes"])


def test_volumes_and_mounted_config_load(compose: dict[str, Any]) -> None:
    svc = compose["services"]["gangscope"]
    mounts = {}
    for v in svc["volumes"]:
        src, dst, *_ = _interpolate(v).split(":")
        mounts[dst] = src
    env = _env(svc)
    assert set(compose["volumes"]) >= {"kafka-data", "pg-data", "lake-data"}
    assert mounts[env["GANGSCOPE_DATA"]] == "lake-data"
    cfg = ROOT / mounts[env["GANGSCOPE_CONFIG"]]
    assert cfg.is_file()
    # The mounted file plus the service's environment is a valid configuration.
    settings = config.load(environ=dict(env, GANGSCOPE_CONFIG=str(cfg)))
    assert settings.kafka.bootstrap_servers == "kafka:9092"
    assert settings.catalog_url.startswith("postgres://")
    assert str(settings.data) == "/var/lib/gangscope"
    assert settings.server.listen == "0.0.0.0:9108"
    assert settings.log.format == "json"
    assert set(settings.collectors) == {"k8s", "metrics"}
    assert settings.k8s.kubeconfig in mounts  # the kubeconfig the settings name is the one mounted
    assert svc["ports"] == ["${GANGSCOPE_BIND:-127.0.0.1}:9108:9108"] and settings.server.listen.endswith(":9108")
    # The collectors accept its scrape discovery (their own validation, which names a bad key).
    from collectors.metrics.targets import discovery_rules, static_targets

    assert [r.job for r in discovery_rules(settings)] == ["dcgm", "node", "kueue"]
    assert static_targets(settings) == []


def test_dockerfile_copies_every_package() -> None:
    dockerfile = (ROOT / "deploy/compose/Dockerfile").read_text()
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    for pattern in packages["include"]:
        pkg = pattern.rstrip("*")
        assert re.search(rf"^COPY {pkg} ", dockerfile, re.M), pkg
    assert re.search(r"^USER (?!root)", dockerfile, re.M)  # not root
    assert 'ENTRYPOINT ["gangscope"]' in dockerfile


def test_docker_compose_config() -> None:
    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("no Docker CLI with the compose plugin here; the YAML checks above still ran")
    out = subprocess.run([docker, "compose", "-f", str(COMPOSE), "--profile", "scale-out", "config", "--quiet"],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT)})
    assert out.returncode == 0, out.stderr


def test_published_ports_bind_to_loopback_unless_configured() -> None:
    """Every port published to the host binds to 127.0.0.1 unless GANGSCOPE_BIND says otherwise."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    published = [(name, p) for name, svc in compose["services"].items() for p in svc.get("ports", [])]
    assert published
    for name, port in published:
        assert isinstance(port, str) and port.startswith("${GANGSCOPE_BIND:-127.0.0.1}:"), (name, port)
