"""Which metric names are which canonical signal, and how to read their values.

The map reaches ``sql/staging/stg_metric_signals.sql`` as the DuckDB variable
``signal_map`` (a LIST of STRUCT, set by the model runner from ``sql_variables``). Each
entry: ``signal``; ``metric`` and ``match`` (``exact`` name, ``suffix`` of the name, or a
``regex`` matching the whole name); ``kind``:

* ``gauge``: the value as written, times ``scale`` (also for DCGM "counters" that are rates);
* ``counter``: per-second rate between consecutive samples of a series, times ``scale``
  (a decrease is a reset; a 32-bit counter stuck at 4294967295 is saturated: rate NULL);
* ``code``: the value is a code, not a quantity (last XID, IB port state), passed as is;

optional ``label``/``label_value`` (the series must carry that label, key compared
case-insensitively, value case-insensitively); ``unit`` of the resulting value; and
``priority`` (lower wins when several entries match one series: configured entries first,
then exact names, regexes, suffix rules).

Defaults are the real names in ``shared/reference/telemetry/`` (dcgm-exporter CSVs and
DCGM 4.6 aliases, node_exporter's infiniband collector) and the Kueue and Ray notes.
Configuration extends it: ``metrics.throughput_metrics`` (names; ``*_total`` read as
counters) and ``metrics.signals`` (``{signal: ["NAME[:gauge|counter|code[:scale]]", ...]}``).
"""

from __future__ import annotations

from typing import Any

from gangscope.config import Settings
from gangscope.errors import UserError

SIGNALS = ("nvlink_bw", "pcie_bw", "ib_bw", "nvlink_errors", "ib_errors", "ib_port_state", "xid", "ecc_dbe",
           "gpu_util", "sm_active", "sm_clock", "gpu_temp", "gpu_power", "clock_reasons", "clock_events",
           "throttle_time", "throughput", "kueue_pending", "kueue_admission_wait", "ray_pg_pending")
KINDS = ("gauge", "counter", "code")

# A counter rate needs its previous sample within this many seconds; older gaps give NULL.
MAX_RATE_GAP_S = 600.0

# (signal, match, metric, kind, scale, unit, label, label_value)
_Row = tuple[str, str, str, str, float, str, str | None, str | None]
DEFAULTS: list[_Row] = [
    # NVLink bandwidth, bytes/s. BANDWIDTH_TOTAL/_L<n> are typed counter but DCGM computes a rate in MB/s.
    ("nvlink_bw", "exact", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "gauge", 1e6, "bytes/s", None, None),
    ("nvlink_bw", "exact", "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL", "gauge", 1e6, "bytes/s", None, None),  # DCGM 4.6
    ("nvlink_bw", "regex", r"DCGM_FI_DEV_NVLINK_BANDWIDTH_L\d+", "gauge", 1e6, "bytes/s", None, None),
    ("nvlink_bw", "regex", r"DCGM_FI_DEV_NVLINK_(TX|RX)_(BANDWIDTH|THROUGHPUT)_TOTAL", "gauge", 1e6, "bytes/s",
     None, None),
    # DCP NVLink bytes are per-second gauges like PCIE_*_BYTES.
    ("nvlink_bw", "regex", r"DCGM_FI_PROF_NVLINK_(L\d+_)?(TX|RX)_BYTES(_PER_LINK)?", "gauge", 1.0, "bytes/s",
     None, None),
    # NVLink5 true byte counters.
    ("nvlink_bw", "regex", r"DCGM_FI_DEV_NVLINK_COUNT_(TX|RX)_BYTES(_TOTAL)?", "counter", 1.0, "bytes/s",
     None, None),
    # PCIe bandwidth, bytes/s: PROF_PCIE_*_BYTES are bytes/s gauges; the deprecated DEV_*_THROUGHPUT are KB/s.
    ("pcie_bw", "regex", r"DCGM_FI_PROF_PCIE_(TX|RX)_BYTES", "gauge", 1.0, "bytes/s", None, None),
    ("pcie_bw", "regex", r"DCGM_FI_DEV_PCIE_(TX|RX)_THROUGHPUT", "gauge", 1e3, "bytes/s", None, None),
    # InfiniBand bandwidth, bytes/s: node_exporter's data counters are already bytes (procfs multiplies by 4).
    ("ib_bw", "regex", r"node_infiniband_port_data_(received|transmitted)_bytes_total", "counter", 1.0, "bytes/s",
     None, None),
    # NVLink link errors, errors/s (CRC flit/data, replay, recovery; totals, per link, NVLink5 DL errors).
    ("nvlink_errors", "regex", r"DCGM_FI_DEV_NVLINK_(CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR_COUNT_\w+",
     "counter", 1.0, "errors/s", None, None),
    ("nvlink_errors", "regex", r"DCGM_FI_DEV_NVLINK_ERROR_DL_\w+", "counter", 1.0, "errors/s", None, None),
    ("nvlink_errors", "exact", "DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS", "counter", 1.0, "errors/s",
     None, None),
    # InfiniBand link errors, errors/s (what NVSentinel treats as NIC hardware trouble; not congestion).
    ("ib_errors", "regex", r"node_infiniband_(symbol_error|link_downed|link_error_recovery|"
     r"local_link_integrity_errors|excessive_buffer_overrun_errors|port_errors_received)_total",
     "counter", 1.0, "errors/s", None, None),
    # IB port state code: 4 = ACTIVE (1 down, 2 init, 3 armed, 5 active defer).
    ("ib_port_state", "exact", "node_infiniband_state_id", "code", 1.0, "state code", None, None),
    # Last XID code seen on the GPU (0: none); not a count.
    ("xid", "exact", "DCGM_FI_DEV_XID_ERRORS", "code", 1.0, "xid code", None, None),
    ("xid", "exact", "DCGM_FI_DEV_XID_ERROR", "code", 1.0, "xid code", None, None),  # DCGM 4.6 name
    # Double-bit ECC and row-remap failures: > 0 means trouble (errors/s or rows/s; ROW_REMAP_FAILURE 0/1).
    ("ecc_dbe", "regex", r"DCGM_FI_DEV_ECC_DBE_(VOL|AGG)_TOTAL", "counter", 1.0, "errors/s", None, None),
    ("ecc_dbe", "exact", "DCGM_FI_DEV_RETIRED_DBE", "counter", 1.0, "pages/s", None, None),
    ("ecc_dbe", "exact", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", 1.0, "rows/s", None, None),
    ("ecc_dbe", "exact", "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", "counter", 1.0, "rows/s", None, None),
    ("ecc_dbe", "exact", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", 1.0, "0/1", None, None),
    ("ecc_dbe", "exact", "DCGM_FI_DEV_ROW_REMAP_FAILED", "gauge", 1.0, "0/1", None, None),  # DCGM 4.6 name
    # GPU utilisation, percent 0..100.
    ("gpu_util", "exact", "DCGM_FI_DEV_GPU_UTIL", "gauge", 1.0, "percent", None, None),
    # SM active, ratio 0..1.
    ("sm_active", "exact", "DCGM_FI_PROF_SM_ACTIVE", "gauge", 1.0, "ratio", None, None),
    ("sm_active", "exact", "DCGM_FI_PROF_SM_UTIL_RATIO", "gauge", 1.0, "ratio", None, None),  # DCGM 4.6 name
    # Throttling (gpu_throttle). SM clock, MHz: in dcgm-exporter's default counters, so a throttled GPU is seen
    # against its peers without any opt-in field.
    ("sm_clock", "exact", "DCGM_FI_DEV_SM_CLOCK", "gauge", 1.0, "MHz", None, None),
    # GPU temperature (C) and board power (W); DCGM 4.6 adds unit-suffixed names, the old ones stay aliases.
    ("gpu_temp", "exact", "DCGM_FI_DEV_GPU_TEMP", "gauge", 1.0, "C", None, None),
    ("gpu_temp", "exact", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "gauge", 1.0, "C", None, None),
    ("gpu_power", "exact", "DCGM_FI_DEV_POWER_USAGE", "gauge", 1.0, "W", None, None),
    ("gpu_power", "exact", "DCGM_FI_DEV_BOARD_POWER_WATTS", "gauge", 1.0, "W", None, None),
    # Clock-event (throttle) reasons, field 112: a bit mask (0x4 SW power cap, 0x8 HW slowdown, 0x20 SW thermal,
    # 0x40 HW thermal, 0x80 HW power brake, ...); not in the default counters, the old name is DCGM's alias.
    ("clock_reasons", "exact", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "code", 1.0, "bit mask", None, None),
    ("clock_reasons", "exact", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "code", 1.0, "bit mask", None, None),
    # dcgm-exporter's count of each clock event (label clock_event) within its window: a windowed count, not a
    # counter, whatever its TYPE line says.
    ("clock_events", "exact", "DCGM_EXP_CLOCK_EVENTS_COUNT", "gauge", 1.0, "events per window", None, None),
    # Time spent throttled: violation counters in ns (power, thermal, board limit, reliability) and the per-reason
    # duration fields of DCGM >= 4.2.3, as a rate x 1e-9: the share of time throttled (0..1). Sync-boost and
    # low-utilisation "violations" are not throttling and are left out.
    ("throttle_time", "regex", r"DCGM_FI_DEV_(POWER|THERMAL|BOARD_LIMIT|RELIABILITY)_VIOLATION", "counter", 1e-9,
     "s/s", None, None),
    ("throttle_time", "regex", r"DCGM_FI_DEV_CLOCKS_EVENT_REASON_(SW_POWER_CAP|SW_THERM_SLOWDOWN|HW_THERM_SLOWDOWN|"
     r"HW_POWER_BRAKE_SLOWDOWN)_NS", "counter", 1e-9, "s/s", None, None),
    # Kueue queue depth, workloads (one row per cluster_queue and status; device = cluster_queue).
    ("kueue_pending", "exact", "kueue_pending_workloads", "gauge", 1.0, "workloads", None, None),
    # Kueue admission wait histogram: _sum is seconds waited per second, _count admissions per second;
    # mean wait over an interval = sum rate / count rate (rows told apart by metric).
    ("kueue_admission_wait", "regex", r"kueue_admission_wait_time_seconds_(sum|count)", "counter", 1.0,
     "s/s or 1/s", None, None),
    # Ray placement groups waiting, count.
    ("ray_pg_pending", "exact", "ray_placement_groups", "gauge", 1.0, "placement groups", "State", "PENDING"),
    ("ray_pg_pending", "exact", "ray_gcs_placement_group_count", "gauge", 1.0, "placement groups", "State",
     "Pending"),
    # Training throughput (CONTRACT section 2): gauges by suffix, counters by suffix as a rate.
    *[("throughput", "suffix", s, "gauge", 1.0, "items/s", None, None)
      for s in ("tokens_per_second", "samples_per_second", "steps_per_second", "samples_per_sec", "tps")],
    *[("throughput", "suffix", s, "counter", 1.0, "items/s", None, None)
      for s in ("tokens_total", "samples_total", "steps_total")],
]
_MATCH_ORDER = {"exact": 0, "regex": 1, "suffix": 2}


def _entry(signal: str, match: str, metric: str, kind: str, scale: float, unit: str,
           label: str | None, label_value: str | None) -> dict[str, Any]:
    return {"signal": signal, "metric": metric, "match": match, "kind": kind, "scale": float(scale), "unit": unit,
            "label": label, "label_value": label_value, "priority": 0}


def _configured(settings: Settings) -> list[dict[str, Any]]:
    out = []
    for name in settings.metrics.throughput_metrics:
        if not isinstance(name, str) or not name:
            raise UserError(f"metrics.throughput_metrics: expected metric names, got {name!r}")
        kind = "counter" if name.endswith("_total") else "gauge"
        out.append(_entry("throughput", "exact", name, kind, 1.0, "items/s", None, None))
    for signal, names in settings.metrics.signals.items():
        if not isinstance(names, list):
            raise UserError(f"metrics.signals.{signal}: expected a list of NAME[:kind[:scale]]")
        for spec in names:
            parts = str(spec).split(":")
            if len(parts) > 3 or not parts[0]:
                raise UserError(f"metrics.signals.{signal}: bad entry {spec!r}; expected NAME[:kind[:scale]]")
            kind = parts[1] if len(parts) > 1 else ("counter" if parts[0].endswith("_total") else "gauge")
            if kind not in KINDS:
                raise UserError(f"metrics.signals.{signal}: {spec!r}: kind must be one of {', '.join(KINDS)}")
            try:
                scale = float(parts[2]) if len(parts) > 2 else 1.0
            except ValueError:
                raise UserError(f"metrics.signals.{signal}: {spec!r}: scale is not a number") from None
            out.append(_entry(signal, "exact", parts[0], kind, scale, "configured", None, None))
    return out


def signal_map(settings: Settings) -> list[dict[str, Any]]:
    """Configured entries first, then the defaults (exact, regex, suffix); ``priority`` is the position."""
    defaults = sorted((_entry(*row) for row in DEFAULTS), key=lambda e: _MATCH_ORDER[e["match"]])
    entries = _configured(settings) + defaults
    for i, e in enumerate(entries):
        e["priority"] = i
    return entries


def sql_variables(settings: Settings) -> dict[str, object]:
    """DuckDB variables for the metric staging models."""
    return {"signal_map": signal_map(settings), "max_rate_gap_s": MAX_RATE_GAP_S}
