"""Shared fixtures: real brokers and PostgreSQL per session, a lake in a temp dir, settings.

Two brokers: the embedded Tansu broker (every test that uses ``settings``) and Apache Kafka
(tests/servers/kafka.py). A test marked ``both_brokers`` runs once on each: ids ``[tansu]`` and
``[kafka]``. Mark the tests whose subject is Kafka behaviour (publish, consume, groups, landing
exactly once, replay, the run service), not every test that happens to need a broker.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from gangscope import config
from gangscope.transport.broker import EmbeddedBroker
from tests.servers import alertmanager, kafka, kubernetes, postgres, prometheus, s3

# Screenshots a test took are kept after it passes too (tests/screenshots.py): $GANGSCOPE_SCREENSHOTS, else
# .pytest_cache/d/screenshots.
pytest_plugins = ["tests.screenshots", "tests.cpu"]

# Upstream object and metric shapes, copied into the clone with their sources (tests/fixtures/reference/README.md).
REFERENCE = Path(__file__).resolve().parent / "fixtures" / "reference"
# No test watches the developer's own cluster by accident: `run` without `collectors` looks for a kubeconfig (or the
# in-cluster service account). Tests that want one name it.
os.environ["KUBECONFIG"] = str(Path(tempfile.gettempdir()) / "gangscope-tests-no-kubeconfig")
os.environ.pop("KUBERNETES_SERVICE_HOST", None)


BROKERS = ("tansu", "kafka")
T = TypeVar("T")


def _started(start: Callable[[], T]) -> T:
    """A test server, started; a machine that cannot run it skips the tests that need it, except in CI."""
    try:
        return start()
    except RuntimeError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(e))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "both_brokers: run on the embedded broker and on Apache Kafka")
    # pytest-xdist hands files out largest first, which put the one-test live e2e files last, one after the other
    # on one worker; the order of pytest_collection_modifyitems below is kept instead.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# Tests whose binaries .ci/run builds in the background (tests/servers/gobuild.py): last, so the build has the
# whole run to finish; the real control plane's files (tests/k8s_real/) in one worker, so one control plane starts.
LAST = ("/tests/k8s_real/", "/tests/deploy/test_helm_chart.py", "/tests/deploy/test_object_storage")
# The other files of several minutes each (--durations): first, when no earlier run measured them.
LONG = ("/tests/e2e/", "/tests/simulate/test_kinds_live.py")
LONG_S = 180.0  # what a long file counts as until a run measured it
# Each file's seconds in the last run that ran it (setup + call + teardown summed), kept by the controller: the next
# run hands files out longest first by these (the workers of -n 4 then end together), and the notes read them.
TIMES = Path.home() / ".cache" / "gangscope-test-times.json"
_times: dict[str, float] = {}


def _file(nodeid: str) -> str:
    """tests/k8s_real/ is one unit of work (see pytest_xdist_make_scheduler), so one entry."""
    path = nodeid.split("::")[0]
    return "tests/k8s_real" if path.startswith("tests/k8s_real/") else path


def _measured() -> dict[str, float]:
    try:
        data = json.loads(TIMES.read_text())
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (minutes each, mostly waiting on servers and simulated time), then the others: with
    the workers of ``-n 4 --dist loadfile`` the long ones run beside the rest and no worker is left with one at the
    end. Longest by the last run's measured seconds where there are any (``TIMES``), else by the rule of thumb:
    ``LONG`` (and ``LAST``) first, the rest by number of tests (ties too). While the background Go build runs, the
    tests that wait for it go last instead (with the binaries cached it is over before the tests start)."""
    from tests.servers import gobuild

    building = gobuild.running()
    measured = _measured()
    per_file: dict[Path, int] = {}
    for item in items:
        per_file[item.path] = per_file.get(item.path, 0) + 1

    def key(item: pytest.Item) -> tuple[bool, float, int]:
        path = str(item.path)
        last = any(x in path for x in LAST)
        long = any(x in path for x in LONG) or (last and not building)
        seconds = measured.get(_file(item.nodeid)) or (LONG_S if long else 0.0)
        return building and last, -seconds, -per_file[item.path]

    items.sort(key=key)
    if building:
        # Their first test waits for the build in its setup, which pytest-timeout counts: a cold build (~40 min on 2
        # cores) outlasted the 600 s and every test of the control plane errored. The wait is allowed on top.
        for item in items:
            if any(x in str(item.path) for x in LAST):
                marker = item.get_closest_marker("timeout")
                own = float(marker.args[0]) if marker and marker.args else float(config.getini("timeout") or 0)
                item.add_marker(pytest.mark.timeout(own + gobuild.WAIT_S), append=False)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _times[_file(report.nodeid)] = _times.get(_file(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller (or a run without workers) keeps this run's per-file seconds beside the earlier ones."""
    if hasattr(session.config, "workerinput") or not _times:
        return
    with contextlib.suppress(OSError):
        TIMES.parent.mkdir(parents=True, exist_ok=True)
        TIMES.write_text(
            json.dumps({**_measured(), **{k: round(v, 1) for k, v in _times.items()}}, indent=0, sort_keys=True)
        )


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile`` with tests/k8s_real/ as one unit: both its files share one control plane (a session
    fixture per worker would start two)."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/k8s_real" if nodeid.startswith("tests/k8s_real/") else super()._split_scope(nodeid)

    return Scheduling(config, log)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "broker" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_brokers"):
        metafunc.parametrize("broker", BROKERS, indirect=True)


@pytest.fixture(scope="session")
def tansu_broker() -> Iterator[EmbeddedBroker]:
    """The embedded Kafka-protocol broker (Tansu) on a free loopback port."""
    b = EmbeddedBroker().start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def kafka_server() -> Iterator[kafka.KafkaServer]:
    """Apache Kafka, one KRaft node with a PLAINTEXT and a SASL_SSL listener. In CI a missing Kafka fails."""
    server = _started(kafka.start)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest) -> EmbeddedBroker | kafka.KafkaServer:
    """The broker of this test: Tansu unless the test is marked ``both_brokers`` (then each in turn)."""
    name = getattr(request, "param", "tansu")
    return request.getfixturevalue("kafka_server" if name == "kafka" else "tansu_broker")


@pytest.fixture
def settings(
    tmp_path: Path, broker: EmbeddedBroker | kafka.KafkaServer, request: pytest.FixtureRequest
) -> config.Settings:
    """Settings pointing at this test's broker, with topics and group unique to this test."""
    prefix = f"t{abs(hash(request.node.nodeid)) % 10**8}."
    return config.load(
        overrides={
            "data": str(tmp_path / "data"),
            "kafka": {"bootstrap_servers": broker.bootstrap, "topic_prefix": prefix, "partitions": 4},
            "pipeline": {"group_id": f"{prefix}pipeline", "flush_seconds": 0.5, "idle_seconds": 3.0},
        },
        environ={},
    )


@pytest.fixture
def offline_settings(tmp_path: Path) -> config.Settings:
    """Settings for tests that need the lake but no broker."""
    return config.load(overrides={"data": str(tmp_path / "data")}, environ={})


@pytest.fixture(scope="session")
def reference() -> Path:
    """tests/fixtures/reference: real objects and metric listings the fixtures are built from."""
    return REFERENCE


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[kubernetes.KubeCluster]:
    """A real Kubernetes 1.37 control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok, Kueue) on
    free loopback ports, one per session (per worker); tests keep to their own namespaces. Its binaries come from
    ``.ci/build-kubernetes``: without them the ``kubernetes`` tests skip, except in CI."""
    cluster = _started(kubernetes.start)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.PostgresServer]:
    """A private PostgreSQL server on a free loopback port (password auth). In CI a missing server fails."""
    server = _started(postgres.start)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[s3.S3Server]:
    """SeaweedFS (S3 API) on free loopback ports with a bucket and two identities (read-write ``admin``, read-only
    ``reader``) made for the run. Its binary comes from ``.ci/build-kubernetes`` (waited for while it builds); a
    missing one skips the ``s3`` tests, except in CI."""
    server = _started(s3.start)
    yield server
    server.remove()


@pytest.fixture(scope="session")
def alertmanager_server() -> Iterator[alertmanager.AlertmanagerServer]:
    """A private Alertmanager on a free loopback port (Debian prometheus-alertmanager). In CI a missing one fails."""
    server = _started(alertmanager.start)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def node_exporter() -> Iterator[prometheus.Process]:
    """A real node_exporter (Debian prometheus-node-exporter) on a free loopback port."""
    server = _started(prometheus.start_node_exporter)
    yield server
    server.stop()


@pytest.fixture
def start_prometheus() -> Iterator[Callable[[dict], prometheus.Prometheus]]:
    """``start_prometheus(config_dict)``: a real Prometheus (Debian prometheus), stopped after the test."""
    started: list[prometheus.Prometheus] = []

    def start(cfg: dict) -> prometheus.Prometheus:
        server = _started(lambda: prometheus.start_prometheus(cfg))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
