"""Apache Kafka for the tests: one KRaft node (broker + controller) on free loopback ports.

The jars come from Maven Central through ``tests/kafka/pom.xml`` (``.ci/run`` copies them into
``~/.cache/gangscope-kafka/<version>``; here too when missing and ``mvn`` is on the PATH) and run
on the machine's JDK. Storage is formatted with Kafka's own StorageTool, which also creates the
SCRAM user. Two client listeners: PLAINTEXT for most tests, and SASL_SSL (SCRAM-SHA-512 over TLS,
certificate from a throwaway CA made here with ``openssl``) for the production-settings tests.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.servers.process import free_port, stop_and_remove

POM = Path(__file__).resolve().parents[1] / "kafka" / "pom.xml"
VERSION = re.search(r"<kafka.version>(.+?)</kafka.version>", POM.read_text()).group(1)  # type: ignore[union-attr]
LIBS = Path(os.environ.get("GANGSCOPE_KAFKA_LIBS") or Path.home() / ".cache" / "gangscope-kafka" / VERSION)
HEAP = "-Xmx384m"
SCRAM_USER = "gangscope"
SCRAM_PASSWORD = "kafka-test-secret-4e2a"  # a throwaway broker's password; also a canary for redaction tests
_MAIN_SERVER = "kafka.Kafka"
_MAIN_STORAGE = "kafka.tools.StorageTool"


def fetch_jars() -> Path:
    """The broker's jars, copied from Maven's cache (downloaded once) when not there yet."""
    if (LIBS / ".complete").exists():
        return LIBS
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"Apache Kafka jars not in {LIBS} and no mvn to fetch them (run .ci/run)")
    done = subprocess.run(
        [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={LIBS}",
         "-DincludeScope=runtime"], capture_output=True, text=True, timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"mvn could not fetch Apache Kafka {VERSION}: {done.stdout[-800:]}{done.stderr[-800:]}")
    (LIBS / ".complete").touch()
    return LIBS


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("no java on the PATH (Apache Kafka needs a JDK 17+)")
    return java


@dataclass
class Tls:
    """A throwaway CA and the broker's certificate for 127.0.0.1 / localhost (PEM files)."""

    ca_file: Path
    broker_pem: Path  # the broker's private key and certificate chain, one file (Kafka's PEM keystore)


def make_tls(directory: Path) -> Tls:
    directory.mkdir(parents=True, exist_ok=True)

    def ssl(*args: str) -> None:
        done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60, cwd=directory)
        if done.returncode != 0:
            raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()[-400:]}")

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=gangscope test CA")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
        "-subj", "/CN=localhost")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "broker.crt", "-days", "2", "-extfile", "san.ext")
    ssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker.pk8")
    pem = directory / "broker.pem"
    pem.write_text((directory / "broker.pk8").read_text() + (directory / "broker.crt").read_text())
    return Tls(directory / "ca.pem", pem)


@dataclass
class KafkaServer:
    bootstrap: str  # PLAINTEXT listener
    sasl_bootstrap: str  # SASL_SSL listener, SCRAM-SHA-512
    tls: Tls
    directory: Path
    process: subprocess.Popen[bytes]
    started_s: float  # seconds from launch to the first answered metadata request

    @property
    def log(self) -> str:
        path = self.directory / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def rss_mb(self) -> float:
        """Resident memory of the broker's JVM now."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        stop_and_remove(self.process, self.directory, timeout_s=30)


_LOG4J = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""


def _properties(root: Path, ports: dict[str, int], tls: Tls) -> str:
    plain, sasl, controller = ports["plain"], ports["sasl"], ports["controller"]
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller}",
        f"listeners=PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{controller}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{sasl}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        f"log.dirs={root / 'data'}",
        "num.partitions=1",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=4",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "log.flush.interval.messages=9223372036854775807",
        "num.network.threads=2",
        "num.io.threads=4",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.ssl.keystore.type=PEM",
        f"listener.name.sasl_ssl.ssl.keystore.location={tls.broker_pem}",
        "",
    ])


def start(timeout_s: float = 90.0) -> KafkaServer:
    """Format storage and start the node; raises RuntimeError with the reason when it cannot."""
    libs = fetch_jars()
    java = _java()
    root = Path(tempfile.mkdtemp(prefix="gangscope-kafka-"))
    tls = make_tls(root / "tls")
    ports = {name: free_port() for name in ("plain", "sasl", "controller")}
    props = root / "server.properties"
    props.write_text(_properties(root, ports, tls))
    log4j = root / "log4j2.properties"
    log4j.write_text(_LOG4J.format(log=root / "server.log"))
    base = [java, HEAP, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k",
            f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*"]
    fmt = subprocess.run(
        [*base, _MAIN_STORAGE, "format", f"--cluster-id={_cluster_id()}", "-c", str(props), "--ignore-formatted",
         "--add-scram", f"SCRAM-SHA-512=[name={SCRAM_USER},password={SCRAM_PASSWORD}]"],
        capture_output=True, text=True, timeout=120,
    )
    if fmt.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"kafka storage format failed: {(fmt.stdout + fmt.stderr).strip()[-800:]}")
    t0 = time.monotonic()
    out = open(root / "stdout.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen([*base, _MAIN_SERVER, str(props)], stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    server = KafkaServer(f"127.0.0.1:{ports['plain']}", f"127.0.0.1:{ports['sasl']}", tls, root, proc, 0.0)
    deadline = t0 + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = ((root / "stdout.log").read_text(errors="replace") + server.log)[-1500:]
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"kafka exited with code {proc.returncode}: {tail}")
        if _answers(server.bootstrap):
            server.started_s = time.monotonic() - t0
            return server
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"kafka did not answer on {server.bootstrap} within {timeout_s:.0f} s")


def _cluster_id() -> str:
    """A new cluster id as Kafka wants it: 16 random bytes, URL-safe base64 without padding.

    It may begin with ``-``, so it is passed as ``--cluster-id=ID``: as a separate argument
    argparse takes it for an option (1 start in 64 failed that way)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()[:22]


def _answers(bootstrap: str) -> bool:
    """True once the broker serves metadata with itself as a live broker."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    host, port = bootstrap.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
    except OSError:
        return False
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    except (KafkaError, OSError):
        return False
    try:
        return bool(admin.describe_cluster().get("brokers"))
    except (KafkaError, OSError):
        return False
    finally:
        admin.close()
