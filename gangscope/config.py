"""Settings: flags > ``GANGSCOPE_*`` environment > YAML file > defaults, validated once.

Every section is a dataclass below; its field names are the YAML keys. Environment
variables map as ``GANGSCOPE_<SECTION>_<KEY>`` (e.g. ``GANGSCOPE_KAFKA_BOOTSTRAP_SERVERS``,
``GANGSCOPE_PIPELINE_FLUSH_SECONDS``), plus three short forms the contract names:
``GANGSCOPE_DATA``, ``GANGSCOPE_CLUSTER``, ``GANGSCOPE_CATALOG``. Unknown keys and
values of the wrong type are errors that name the key and where it came from.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml


class ConfigError(ValueError):
    """A setting is missing, unknown or of the wrong type; the message names it."""


@dataclass
class KafkaSettings:
    bootstrap_servers: str | None = None  # None: start the embedded broker
    topic_prefix: str = "gangscope."
    partitions: int = 4
    compression: str = "zstd"  # by measurement: docs/records.md, bench/codecs.py
    # Largest record (encoded, before compression) a collector sends; a bigger one goes to the dead letter
    # with its reason instead of being retried against the broker's limit. Keep it at or below the broker's
    # message.max.bytes when compression is off.
    max_record_bytes: int = 16 << 20
    # Passed through to kafka-python (security_protocol, sasl_mechanism, sasl_plain_username,
    # sasl_plain_password, ssl_cafile, ssl_certfile, ssl_keyfile, ...). Never logged.
    security: dict[str, Any] = field(default_factory=dict)


@dataclass
class PipelineSettings:
    group_id: str = "gangscope-pipeline"
    flush_seconds: float = 2.0
    batch_records: int = 2000
    batch_bytes: int = 32 << 20  # pipeline: also flush at this many value bytes (bounds memory)
    idle_seconds: float = 4.0  # --once: stop after this long with nothing new


@dataclass
class K8sSettings:
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: list[str] = field(default_factory=list)  # empty: all
    kinds: list[str] = field(default_factory=list)  # empty: every kind of CONTRACT section 2
    discovery_interval_s: float = 300.0
    page_limit: int = 500
    buffer_max_records: int = 100_000


@dataclass
class MetricsSettings:
    targets: list[dict[str, Any]] = field(default_factory=list)
    discovery: list[dict[str, Any]] = field(default_factory=list)
    # How discovered exporter pods are scraped: pod_ip (inside the cluster), apiserver (the API server's pod proxy,
    # from a kubeconfig outside it), or auto: pod_ip with the in-cluster service account, apiserver otherwise.
    discovery_via: str = "auto"
    default_interval_s: float = 15.0
    default_timeout_s: float = 5.0
    throughput_metrics: list[str] = field(default_factory=list)
    signals: dict[str, list[str]] = field(default_factory=dict)
    # Processes that parse and encode scrapes (collectors/metrics/scrape.py). None: one per core
    # when there are at least 100 targets, else parse in the scraper; 0: always in the scraper.
    parse_workers: int | None = None
    # A scrape whose (decompressed) body is larger fails whole (up=0), like Prometheus' body_size_limit.
    max_body_bytes: int = 64 << 20


@dataclass
class RemoteWriteSettings:
    """The Prometheus remote-write receiver (collector ``remote_write`` of ``run``; docs/collectors-metrics.md)."""

    ack_timeout_s: float = 20.0  # answer 503 (Prometheus retries) when not decoded and acknowledged by then
    max_buffered_records: int = 50_000  # records waiting for Kafka above which new requests get 503 at once
    max_body_bytes: int = 32 << 20  # a larger (snappy-compressed) request is answered 413
    # Processes that decode and encode requests (collectors/prom/remote_write.py). None: one per core (at
    # most 4) on a machine with more than one; 0: in the receiving process.
    workers: int | None = None


@dataclass
class Thresholds:
    admission_wait_s: float = 600.0
    gang_timeout_s: float = 300.0
    throughput_ratio: float = 0.8
    throughput_min_samples: int = 3
    bandwidth_ratio: float = 0.6
    baseline_start_s: float = 120.0
    baseline_end_s: float = 720.0
    # Added for the SQL models (issue #6): bucket width the models align samples to (the scrape interval),
    # how long a GPU's series must be absent while its node's other GPUs report to count as gone, and how
    # many devices may show the same XID before it is read as a workload error rather than hardware.
    bucket_s: float = 15.0
    gpu_missing_s: float = 120.0
    xid_spread_devices: int = 3
    # A bandwidth drop counts only if the node's traffic fell below this share of the job's own throughput
    # ratio (traffic that shrinks exactly as much as the work is a symptom of the slowdown, not its cause).
    bandwidth_vs_throughput: float = 0.75
    # Issue 31 (CONTRACT section 4): throughput under pause_ratio x baseline is a pause (checkpoint, evaluation),
    # normal while shorter than stall_s; containers of a bound pod not started after startup_timeout_s are a
    # start-up failure; a GPU whose SM clock runs below throttle_clock_ratio x the median of the job's other
    # GPUs is throttled; a node NotReady for node_lost_s under a job's pods has lost them.
    pause_ratio: float = 0.05
    stall_s: float = 300.0
    startup_timeout_s: float = 600.0
    throttle_clock_ratio: float = 0.85
    node_lost_s: float = 300.0


@dataclass
class ScheduleSettings:
    models_build: str = "interval:60"
    report_hourly: str = "cron:0 * * * *"
    report_daily: str = "cron:5 0 * * *"
    compaction: str = "interval:600"
    retention: str = "cron:30 3 * * *"
    reports_dir: str | None = None  # default <data>/reports
    reports_keep: int = 48
    webhook_url: str | None = None


@dataclass
class ReportSettings:
    # IANA time zone of every time a report shows (axis labels, tables, sentences); the axis names it.
    timezone: str = "UTC"


@dataclass
class RetentionSettings:
    raw_days: float = 7.0
    marts_days: float = 90.0
    # Parquet files no snapshot needs are deleted only after this grace, so running queries finish (issue #8).
    file_grace_minutes: float = 10.0


@dataclass
class ServerSettings:
    listen: str = "127.0.0.1:9108"  # gangscope's own /metrics and /healthz in `run`, and the live page
    page: bool = True  # the live page (/ and /jobs/NAMESPACE/JOB) on the same server; docs/page.md
    # The page asks for either credential when one is set (from a Secret: GANGSCOPE_SERVER_TOKEN,
    # GANGSCOPE_SERVER_BASIC_AUTH); /metrics and /healthz stay open for probes and Prometheus. Never logged.
    token: str | None = None  # Authorization: Bearer <token>
    basic_auth: str | None = None  # USER:PASSWORD, Authorization: Basic
    page_poll_s: float = 5.0  # how often an open page asks whether anything changed
    page_resolved_hours: float = 6.0  # resolved findings shown for this long after they ended


@dataclass
class FindingsSettings:
    """Where finding changes go (opened / updated / resolved); docs/findings.md."""

    topic: bool = True  # publish each change to <prefix>findings, keyed by the finding id
    alertmanager_url: str | None = None  # e.g. http://alertmanager:9093 (POST /api/v2/alerts)
    alert_resend_s: float = 60.0  # open alerts are sent again this often (never less than once a build)
    alert_ttl_s: float = 300.0  # endsAt of an open alert: send time + this; lapses if gangscope stops sending
    report_url: str | None = None  # link in each alert's annotations; default file://<reports dir>


@dataclass
class ClockSettings:
    """A sandbox's clock (gangscope/clock.py): unset, observation times are the wall clock."""

    sim_origin: str | None = None  # RFC 3339 time the clock read at unix time wall_origin
    wall_origin: float = 0.0
    speed: float = 1.0


@dataclass
class LogSettings:
    level: str = "INFO"
    format: str = "text"  # text | json


@dataclass
class Settings:
    data: Path = Path("gangscope-data")
    cluster: str = "default"
    catalog: str | None = None  # None: sqlite:<data>/catalog.sqlite; or postgres://...
    # DuckLake DATA_PATH for the Parquet files; None: <data>/lake. Object storage: s3://bucket/lake/ (issue #8).
    lake_data_path: str | None = None
    # DuckDB's memory per lake connection (model builds, the pipeline's writer, reports); past it DuckDB spills to
    # <data>/tmp. None: DuckDB's default, 80% of RAM (a full build at 1,024 GPUs x 6 h then peaked at 2.7 GB RSS).
    memory_limit: str | None = "512MB"
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    k8s: K8sSettings = field(default_factory=K8sSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    remote_write: RemoteWriteSettings = field(default_factory=RemoteWriteSettings)
    thresholds: Thresholds = field(default_factory=Thresholds)
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    report: ReportSettings = field(default_factory=ReportSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    log: LogSettings = field(default_factory=LogSettings)
    clock: ClockSettings = field(default_factory=ClockSettings)
    findings: FindingsSettings = field(default_factory=FindingsSettings)
    # For `run`: k8s, metrics, remote_write. None (unset): k8s and metrics when a kubeconfig context or the in-cluster
    # service account is there (gangscope/app/startup.py), else none; [] runs none.
    collectors: list[str] | None = None
    # Time sanity (gangscope/timesanity.py): how far in the future of its receipt an input time may be.
    clock_skew_s: float = 600.0

    @property
    def catalog_url(self) -> str:
        return self.catalog or f"sqlite:{self.data / 'catalog.sqlite'}"

    @property
    def lake_path(self) -> Path:
        return self.data / "lake"


COLLECTORS = ("k8s", "metrics", "remote_write")
_SHORT_ENV = {"GANGSCOPE_DATA": ("data",), "GANGSCOPE_CLUSTER": ("cluster",), "GANGSCOPE_CATALOG": ("catalog",)}


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value == "" and type(None) in typing.get_args(tp)):
            return None
        return _coerce(value, args[0], where)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return _build(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if tp in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            out = tp(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected {'an integer' if tp is int else 'a number'}, got {value!r}") from None
        if out < 0:
            raise ConfigError(f"{where}: must not be negative, got {value!r}")
        return out
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: expected a string, got {type(value).__name__}")
        return str(value)
    if tp is Path:
        return Path(str(value))
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)
        return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return dict(value)
    return value


def _build(cls: type, values: dict[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown setting {unknown[0]!r} (known: {', '.join(sorted(names))})")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where else k) for k, v in values.items()}
    return cls(**kwargs)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "security":
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _security_key(key: str) -> bool:
    """kafka-python's security settings: what ``kafka.security`` passes through. Any other name (a typo, a test
    harness's own GANGSCOPE_KAFKA_LIBS) is an unknown setting here, not an error from the Kafka client later."""
    return key == "security_protocol" or key.startswith(("sasl_", "ssl_"))


def _env_layer(environ: typing.Mapping[str, str]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    sections = {f.name: f for f in dataclasses.fields(Settings)}
    for name, value in environ.items():
        if not name.startswith("GANGSCOPE_"):
            continue
        if name in _SHORT_ENV:
            layer[_SHORT_ENV[name][0]] = value
            continue
        rest = name[len("GANGSCOPE_"):].lower()
        for sec in sections:
            tp = typing.get_type_hints(Settings)[sec]
            if dataclasses.is_dataclass(tp) and rest.startswith(sec + "_"):
                key = rest[len(sec) + 1:]
                keys = {g.name for g in dataclasses.fields(tp)}
                if key in keys:
                    layer.setdefault(sec, {})[key] = value
                elif sec == "kafka" and _security_key(key):
                    # Security passthrough, e.g. GANGSCOPE_KAFKA_SASL_PLAIN_PASSWORD.
                    layer.setdefault(sec, {}).setdefault("security", {})[key] = value
                else:
                    raise ConfigError(f"environment {name}: unknown setting {sec}.{key}")
                break
            if rest == sec and not dataclasses.is_dataclass(tp):
                layer[sec] = value
                break
        else:
            raise ConfigError(f"environment {name}: unknown setting")
    return layer


def load(
    config_file: str | os.PathLike[str] | None = None,
    overrides: dict[str, Any] | None = None,
    environ: typing.Mapping[str, str] | None = None,
) -> Settings:
    """Layer defaults, the YAML file, ``GANGSCOPE_*`` and flag overrides, then validate.

    ``overrides`` holds flag values as a nested dict; ``None`` values are ignored so an
    unset flag never masks the environment.
    """
    environ = os.environ if environ is None else environ
    config_file = config_file or environ.get("GANGSCOPE_CONFIG")
    merged: dict[str, Any] = {}
    if config_file:
        path = Path(config_file)
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except IsADirectoryError:
            raise ConfigError(f"config file {path} is a directory; name a YAML file") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"config file {path} is not UTF-8 text (byte {e.start}: {e.reason})") from None
        except OSError as e:
            raise ConfigError(f"config file {path}: cannot read: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: expected a mapping at the top level")
        merged = _merge(merged, loaded)
    merged = _merge(merged, _env_layer({k: v for k, v in environ.items() if k != "GANGSCOPE_CONFIG"}))
    merged = _merge(merged, _drop_none(overrides or {}))
    settings = _build(Settings, merged, "")
    _validate(settings)
    return settings


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            sub = _drop_none(v)
            if sub:
                out[k] = sub
        elif v is not None:
            out[k] = v
    return out


def report_zone(name: str) -> tzinfo:
    """The ``tzinfo`` of an IANA zone name (``UTC`` is ``datetime.UTC``); ConfigError naming the key otherwise."""
    if name in ("UTC", "Etc/UTC", "Z"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError, TypeError):
        raise ConfigError(f"report.timezone: unknown time zone {name!r} (an IANA name such as Europe/Berlin, "
                          "America/New_York or UTC)") from None


def _validate(s: Settings) -> None:
    report_zone(s.report.timezone)
    if not s.cluster:
        raise ConfigError("cluster: must not be empty")
    unknown = [k for k in s.kafka.security if not _security_key(str(k))]
    if unknown:
        raise ConfigError(f"kafka.security: unknown setting {unknown[0]!r} (security_protocol, sasl_* and ssl_* pass "
                          "through to kafka-python)")
    if s.kafka.partitions < 1:
        raise ConfigError("kafka.partitions: must be at least 1")
    if s.kafka.compression not in ("gzip", "none", "lz4", "zstd", "snappy"):
        raise ConfigError(f"kafka.compression: unknown codec {s.kafka.compression!r}")
    if s.log.level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ConfigError(f"log.level: expected DEBUG, INFO, WARNING, ERROR or CRITICAL, got {s.log.level!r}")
    if s.data.exists() and not s.data.is_dir():
        raise ConfigError(f"data: {s.data} is a file; --data names the directory that holds the lake")
    if s.clock_skew_s <= 0:
        raise ConfigError(f"clock_skew_s: must be positive, got {s.clock_skew_s!r}")
    if s.log.format not in ("text", "json"):
        raise ConfigError(f"log.format: expected text or json, got {s.log.format!r}")
    if s.memory_limit and not re.fullmatch(r"\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", s.memory_limit, re.I):
        raise ConfigError(f"memory_limit: expected a size such as 512MB or 2GiB, got {s.memory_limit!r}")
    if s.catalog and not s.catalog.startswith(("sqlite:", "postgres:", "postgresql:")):
        raise ConfigError(f"catalog: expected sqlite:PATH or postgres://..., got {s.catalog!r}")
    if s.findings.alert_ttl_s <= s.findings.alert_resend_s:
        raise ConfigError("findings.alert_ttl_s: must exceed findings.alert_resend_s, or open alerts lapse "
                          "between two sends")
    if s.clock.speed <= 0:
        raise ConfigError("clock.speed: must be positive")
    if s.server.basic_auth and ":" not in s.server.basic_auth:
        raise ConfigError("server.basic_auth: expected USER:PASSWORD")  # never the value: it is a credential
    if s.server.page_poll_s < 1:
        raise ConfigError(f"server.page_poll_s: must be at least 1, got {s.server.page_poll_s!r}")
    for c in s.collectors or []:
        if c not in COLLECTORS:
            raise ConfigError(f"collectors: unknown collector {c!r} (known: {', '.join(COLLECTORS)})")
