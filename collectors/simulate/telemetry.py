"""Exporter samples of a scenario in the CONTRACT section 2 metrics replay format, written vectorised.

Targets, each scraped every ``interval`` seconds with its own offset and jitter (so a scrape is one
(job, instance, timestamp) group and times never go backwards through the file):

* ``kueue`` — the Kueue controller (queue depth, admission-wait histogram, evictions);
* ``dcgm-exporter`` per node — per-GPU utilisation, SM clock, SM/tensor activity, PCIe bytes/s, NVLink
  bandwidth and error counters, XID (``err_code``/``err_msg``), ECC DBE, with ``pod``/``namespace``/``container``
  only while a pod holds the GPU, and ``Hostname`` naming the node; clock-event reasons, violation counters and
  the exporter's clock-event count only on nodes whose exporter has them (``Node.dcgm``);
* ``node-exporter`` per node — InfiniBand port state and counters;
* ``training`` per running job — ``train_tokens_per_second`` (or the counter ``train_tokens_total``) from the
  rank-0 pod.

Values are numpy arrays per chunk of scrape rounds; lines are built and written by polars, never one
Python call per sample (128 nodes x 6 h is ~36 M samples).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl

from collectors.simulate.cluster import GPUS_PER_NODE, IB_DEVICES
from collectors.simulate.scenarios import XID_TEXT, Scenario, SimJob, placement_factor

# (name, type, integer-valued). The default-counters.csv fields a classifier reads, plus the opt-in NVLink
# error and ECC counters; MEM_CLOCK and FB_FREE are left out to keep a 1,024-GPU day's file writable (the SM
# clock is in: a throttled GPU shows as its clock against its peers', with the default counters alone).
DCGM = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", True), ("DCGM_FI_DEV_GPU_TEMP", "gauge", True),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", False),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", True), ("DCGM_FI_DEV_GPU_UTIL", "gauge", True),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", True), ("DCGM_FI_DEV_XID_ERRORS", "gauge", True),
    ("DCGM_FI_DEV_FB_USED", "gauge", True),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", True),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", True),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", True),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", True),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", True),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", False), ("DCGM_FI_PROF_SM_ACTIVE", "gauge", False),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", False), ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", False),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", True), ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", True),
)
IB = (
    ("node_infiniband_state_id", "gauge", True), ("node_infiniband_physical_state_id", "gauge", True),
    ("node_infiniband_rate_bytes_per_second", "gauge", True),
    ("node_infiniband_port_data_received_bytes_total", "counter", True),
    ("node_infiniband_port_data_transmitted_bytes_total", "counter", True),
    ("node_infiniband_symbol_error_total", "counter", True),
    ("node_infiniband_link_error_recovery_total", "counter", True),
    ("node_infiniband_link_downed_total", "counter", True),
    ("node_infiniband_port_transmit_wait_total", "counter", True),
)
# Opt-in fields (commented out or absent in dcgm-exporter's CSVs), written only on nodes whose exporter has them
# (``Node.dcgm``): field 112 under its new and its deprecated name, the violation counters (ns), and the exporter's
# windowed clock-event count, one series per bit (reference field/dcgm_throttle-sample.prom).
OPT_IN = (
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", True), ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", True),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", True), ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", True),
)
CLOCK_EVENTS = ((0x1, "gpu_idle"), (0x4, "power_cap"), (0x8, "hw_slowdown"), (0x20, "sw_thermal"),
                (0x40, "hw_thermal"), (0x80, "hw_power_brake"))
CLOCK_EVENTS_WINDOW_MS = 300_000  # --clock-events-count-window-size default
OPT_FIELDS = {"clock_events": {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_POWER_VIOLATION",
                               "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_EXP_CLOCK_EVENTS_COUNT"},
              "throttle_reasons": {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_POWER_VIOLATION",
                                   "DCGM_FI_DEV_THERMAL_VIOLATION"}}
THROUGHPUT = "train_tokens_per_second"
THROUGHPUT_TOTAL = "train_tokens_total"  # a job that reports tokens as a counter (read as a rate)
PEAK_MHZ, IDLE_MHZ = 1980.0, 345.0  # H100 / H200 SXM max boost SM clock; the idle clock
# Kueue's Evicted reasons the scenarios produce, with the metric's underlying_cause
EVICTION_REASONS = (("Preempted", ""), ("PodsReadyTimeout", "WaitForStart"), ("NodeFailures", ""))
PAUSE_LEVEL = 0.012  # throughput during a checkpoint pause: ~1 % of its pace (under pause_ratio)
WAIT_BUCKETS = [1.0, 2.5] + [2.5 * 2 ** k for k in range(1, 15)]  # Kueue generateExponentialBuckets(16)
IB_RATE = 5e10  # 400 Gb/s NDR


@dataclass
class _Family:
    """One kind of target: per-round values (R, targets, metrics, series) and their label prefixes."""

    values: np.ndarray  # float64 (R, T, M, S); NaN = sample absent
    prefix: np.ndarray  # int32 (R, T, M, S) ids into the prefix table
    header: np.ndarray  # int32 (M,) id of the "# TYPE" line of each metric
    is_int: np.ndarray  # bool (M,)
    ts: np.ndarray  # int64 (R, T) scrape time of each block, ms


class Writer:
    def __init__(self, scn: Scenario, start: datetime, interval: float, seed: int):
        self.scn = scn
        self.start_ms = int(start.timestamp() * 1000)
        self.interval = interval
        self.rounds = int(scn.duration // interval)
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, _stable_hash(scn.name)]))
        self.prefixes: list[str] = []
        self.header_text: list[str] = []
        self.nodes = scn.cluster.nodes
        self.n = len(self.nodes)
        self.samples = 0
        self._plan()

    # --- setup: who holds what, when -------------------------------------------------------------------------

    def _plan(self) -> None:
        R, N = self.rounds, self.n
        t = np.arange(R) * self.interval
        self.t = t
        node_ix = {n.name: i for i, n in enumerate(self.nodes)}
        holders: list[tuple[str, str]] = [("", "")]
        self.holder = np.zeros((R, N), dtype=np.int32)
        self.activity = np.zeros((R, N))
        self.bw = np.zeros((R, N))  # interconnect traffic level
        self.hung = np.zeros((R, N), dtype=bool)  # a hung collective: kernels spin, nothing moves
        self.jobs_active: list[tuple[SimJob, np.ndarray, np.ndarray, np.ndarray]] = []
        for j in self.scn.jobs:
            # throughput is a function of placement and of the links the job uses
            factor = np.full(R, placement_factor(j.nodes))
            for lo, hi, f in j.slowdowns:
                factor[(t >= lo) & (t < hi)] *= f
            for fault in self.scn.faults:
                if fault.slows != 1.0 and fault.node in j.nodes:
                    factor[(t >= fault.at) & (t < (fault.until if fault.until is not None else np.inf))] *= fault.slows
            active = np.zeros(R, dtype=bool)
            for lo, hi in j.active_intervals():
                active |= (t >= lo) & (t < hi)
            quiet = np.zeros(R, dtype=bool)  # no progress and no traffic: a checkpoint pause, a hang
            for lo, hi in j.pauses:
                pause = (t >= lo) & (t < hi)
                factor[pause] *= PAUSE_LEVEL
                quiet |= pause
            stalled = np.zeros(R, dtype=bool)
            if j.stall is not None:
                stalled = (t >= j.stall) & (t < (j.restart_at if j.restart_at is not None else np.inf))
                factor[stalled] = 0.0
            hung = stalled & active if j.hang else np.zeros(R, dtype=bool)
            quiet |= hung
            # the series a job reports: absent while it is not active, or once it "disappears"
            reported = active & ~(stalled if j.stall_mode == "gone" else np.zeros(R, dtype=bool))
            released = j.released()
            for gen, (lo, hi) in enumerate(j.holding_intervals(self.scn.duration)):
                names = j.generation(gen)[0]
                for i, node in enumerate(j.nodes):
                    mask = (t >= lo) & (t < min(hi, released.get(i, np.inf) if gen == 0 else hi))
                    k = node_ix[node.name]
                    holders.append((j.namespace, names[i]))
                    self.holder[mask, k] = len(holders) - 1
                    on = active[mask]
                    busy = np.where(on, np.maximum(factor[mask], 0.02), 0.02)
                    self.activity[mask, k] = np.where(quiet[mask] & on & ~hung[mask], 0.05, busy)
                    self.hung[mask, k] = hung[mask]
                    self.bw[mask, k] = np.where(on, np.where(quiet[mask], 0.03, 0.5 + 0.5 * factor[mask]), 0.0)
            if active.any():
                self.jobs_active.append((j, active, factor, reported))
        self.holders = holders
        self.faults = self.scn.faults
        # the exporters of a lost node are silent while it is
        self.down = np.zeros((R, N), dtype=bool)
        for f in self.faults:
            if f.kind == "node_lost":
                self.down[(t >= f.at) & (t < (f.until if f.until is not None else np.inf)), node_ix[f.node.name]] = True

    def _prefix(self, s: str, header_text: str = "") -> int:
        """Register a series' name+labels (or, with ``header_text``, a ``# TYPE`` line); returns its id."""
        self.prefixes.append(s)
        self.header_text.append(header_text)
        return len(self.prefixes) - 1

    def _header(self, name: str, mtype: str) -> int:
        return self._prefix("# TYPE", f"{name} {mtype}")

    # --- families ----------------------------------------------------------------------------------------------

    def _dcgm_setup(self) -> None:
        G = GPUS_PER_NODE
        # The fields: the default ones everywhere, the opt-in ones only if some node's exporter has them.
        self.metrics = list(DCGM)
        self.opt = {n.index: OPT_FIELDS.get(n.dcgm, set()) for n in self.nodes}
        if any(self.opt.values()):
            self.metrics += list(OPT_IN) + [("DCGM_EXP_CLOCK_EVENTS_COUNT", "counter", True)] * len(CLOCK_EVENTS)
        self.D = {name: i for i, (name, _, _) in reversed(list(enumerate(self.metrics)))}  # first slot of a name
        # label prefixes for each (node, holder) pair that occurs
        pairs = np.unique(self.holder.astype(np.int64) * self.n + np.arange(self.n)[None, :])
        self.pair_index = {int(p): i for i, p in enumerate(pairs)}
        K, M = len(pairs), len(self.metrics)
        xid_at: dict[tuple[int, int], int] = {}
        for f in self.faults:
            if f.kind == "xid":
                xid_at[(f.node.index, f.gpu or 0)] = f.xid or 0
        exp0 = self.D.get("DCGM_EXP_CLOCK_EVENTS_COUNT", M)
        table = np.zeros((K, M, G), dtype=np.int32)
        for pi, p in enumerate(pairs):
            h, k = divmod(int(p), self.n)
            node = self.nodes[k]
            ns, pod = self.holders[h]
            for g in range(G):
                base = (f'gpu="{g}",UUID="{node.gpu_uuids[g]}",pci_bus_id="{node.pci_bus_ids[g]}",'
                        f'device="nvidia{g}",modelName="{node.model}",Hostname="{node.name}"')
                tail = f',container="trainer",namespace="{ns}",pod="{pod}"' if pod else ""
                tail += f',job="dcgm-exporter",instance="{node.ip}:9400"'
                for m, (name, _, _) in enumerate(self.metrics):
                    if m >= len(DCGM) and name not in self.opt[k]:
                        continue  # this node's exporter does not have the field: never written
                    extra = ""
                    if m == self.D["DCGM_FI_DEV_XID_ERRORS"]:
                        code = xid_at.get((k, g), 0)
                        extra = f',err_code="{code}",err_msg="{XID_TEXT.get(code, "")}"'
                    elif m >= exp0:
                        extra = (f',clock_event="{CLOCK_EVENTS[m - exp0][1]}",'
                                 f'window_size_in_ms="{CLOCK_EVENTS_WINDOW_MS}"')
                    table[pi, m, g] = self._prefix(f"{name}{{{base}{extra}{tail}}}")
        self.dcgm_table = table
        # One # TYPE line per metric name: the clock-event slots after the first continue its block (-1).
        self.dcgm_headers = np.array([self._header(n, ty) if m < exp0 + 1 else -1
                                      for m, (n, ty, _) in enumerate(self.metrics)], dtype=np.int32)
        self.dcgm_counters = {m: np.zeros((self.n, G)) for m in range(M) if self.metrics[m][1] == "counter"}
        self.dcgm_counters[self.D["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]] += self.rng.integers(0, 3, (self.n, G))
        if exp0 < M:
            for name in ("DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION"):  # a node's past
                self.dcgm_counters[self.D[name]] += self.rng.integers(0, 5 * 10**10, (self.n, G))
            self.reason_window = max(1, int(CLOCK_EVENTS_WINDOW_MS / 1000 // self.interval))
            self.reason_hist = np.zeros((0, self.n, G), dtype=np.int64)

    def _dcgm(self, r0: int, r1: int) -> _Family:
        rng, G, N, D = self.rng, GPUS_PER_NODE, self.n, self.D
        R = r1 - r0
        t = self.t[r0:r1]
        act = self.activity[r0:r1][:, :, None] * np.ones((1, 1, G))
        hung = self.hung[r0:r1][:, :, None] & np.ones((1, 1, G), dtype=bool)
        held = (self.holder[r0:r1] > 0)[:, :, None] * np.ones((1, 1, G), dtype=bool)
        noise = rng.normal(0.0, 1.0, (R, N, G))
        # Per-GPU: a throttled GPU is the busiest of its job (its peers wait for it) at a lower clock, and hot.
        clock = np.ones((R, N, G))
        heat = np.zeros((R, N, G))
        watts = np.ones((R, N, G))
        reasons = np.zeros((R, N, G), dtype=np.int64)
        for f in self.faults:
            k, g = f.node.index, f.gpu or 0
            on = (t >= f.at) & (t < (f.until if f.until is not None else np.inf))
            if f.kind == "throttle":
                ramp = np.clip((t - (f.at - 4 * 60)) / (4 * 60), 0, 1)  # it heats up for 4 min first
                heat[:, k, g] = np.maximum(heat[:, k, g], ramp * (90 - 66))
                act[on, k, g] = np.where(self.activity[r0:r1][on, k] > 0.05, 1.0, act[on, k, g])
                clock[on, k, g] = f.factor
                watts[on, k, g] = 0.8
                reasons[on, k, g] = f.reasons
            elif f.kind == "hot_gpu":  # a GPU running at ~87 C whose clocks hold
                heat[on, k, g] = 87 - 66
            elif f.kind == "clock_dip":  # one scrape
                first = int(np.argmax(t >= f.at)) if (t >= f.at).any() and t[0] - self.interval < f.at else -1
                if first >= 0:
                    clock[first, k, g] = 0.6
        util = np.clip(np.where(act > 0.05, act * 93 + noise * 2.5, act * 40), 0, 100)
        util = np.where(hung, np.clip(98 + noise, 0, 100), util)  # NCCL kernels spin on a hung collective
        sm = np.clip(util / 100 * 0.82 + noise * 0.01, 0, 1)
        sm = np.where(hung, np.clip(0.12 + noise * 0.005, 0, 1), sm)
        tensor = np.where(hung, np.clip(0.004 + noise * 0.001, 0, 1), sm * 0.63)
        bwl = self.bw[r0:r1][:, :, None] * np.ones((1, 1, G))
        v = np.full((R, N, len(self.metrics), G), np.nan)
        busy_clock = np.minimum(PEAK_MHZ, PEAK_MHZ - np.abs(noise) * 12)
        v[:, :, D["DCGM_FI_DEV_SM_CLOCK"]] = np.round(np.where(util > 5, busy_clock * clock,
                                                               IDLE_MHZ + np.abs(noise) * 3))
        temp = np.where(hung, 31 + 0.38 * 40 + noise, 31 + util * 0.38 + noise)
        v[:, :, D["DCGM_FI_DEV_GPU_TEMP"]] = np.round(np.where(heat > 0, np.maximum(temp, 66 + heat + noise), temp))
        power = np.where(hung, 72 + 40 * 3.2 + noise * 9, 72 + util * 6.1 + noise * 9) * watts
        v[:, :, D["DCGM_FI_DEV_POWER_USAGE"]] = np.round(power, 6)
        v[:, :, D["DCGM_FI_DEV_GPU_UTIL"]] = np.round(util)
        v[:, :, D["DCGM_FI_DEV_MEM_COPY_UTIL"]] = np.round(np.where(hung, 1.0, util * 0.41))
        v[:, :, D["DCGM_FI_DEV_FB_USED"]] = np.where(held, 71234 + (noise * 300).round(), 0)
        v[:, :, D["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]] = np.round(np.clip(util / 100 * 0.97, 0, 1), 6)
        v[:, :, D["DCGM_FI_PROF_SM_ACTIVE"]] = np.round(sm, 6)
        v[:, :, D["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]] = np.round(tensor, 6)
        v[:, :, D["DCGM_FI_PROF_DRAM_ACTIVE"]] = np.round(np.where(hung, 0.002, sm * 0.45), 6)
        # Link traffic follows the interconnect level (bwl), which a slow input pipeline lowers less than compute.
        v[:, :, D["DCGM_FI_PROF_PCIE_TX_BYTES"]] = np.round(bwl * 2.3e9 * (1 + noise * 0.03) + 1.1e6)
        v[:, :, D["DCGM_FI_PROF_PCIE_RX_BYTES"]] = np.round(bwl * 3.1e9 * (1 + noise * 0.03) + 2.4e6)
        nvl = bwl * 182_000 * (1 + noise * 0.02)
        crc = np.zeros((R, N, G))
        replay = np.zeros((R, N, G))
        recov = np.zeros((R, N, G))
        dbe = np.zeros((R, N, G))
        xid = np.full((R, N, G), np.nan)
        lost = np.zeros((R, N, G), dtype=bool)
        silent = self.down[r0:r1].copy()
        no_nvlink = np.zeros(N, dtype=bool)
        for f in self.faults:
            k = f.node.index
            on = (t >= f.at) & (t < (f.until if f.until is not None else np.inf))
            if f.kind == "nvlink_degraded":
                nvl[on, k] *= f.factor
                crc[on, k] = rng.poisson(40, (int(on.sum()), G))
                replay[on, k] = rng.poisson(1.5, (int(on.sum()), G))
                recov[on, k, 0] = rng.poisson(0.2, int(on.sum()))
            elif f.kind == "xid":
                xid[t >= f.at, k, f.gpu or 0] = f.xid or 0
            elif f.kind == "ecc_dbe":
                first = int(np.ceil(f.at / self.interval))
                if r0 <= first < r1:
                    dbe[first - r0, k, f.gpu or 0] = 1
            elif f.kind == "gpu_lost":
                lost[t >= f.at, k, f.gpu or 0] = True
            elif f.kind == "exporter_silent":
                silent[t >= f.at, k] = True
            elif f.kind == "nvlink_missing":
                no_nvlink[k] = True
        v[:, :, D["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]] = np.round(np.maximum(nvl, 0))
        v[:, :, D["DCGM_FI_DEV_XID_ERRORS"]] = xid
        incs = [(D["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"], crc),
                (D["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"], replay),
                (D["DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"], recov),
                (D["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"], dbe),
                (D["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"], np.zeros((R, N, G)))]
        if "DCGM_EXP_CLOCK_EVENTS_COUNT" in D:
            incs += self._clock_events(v, util, reasons)
        for m, inc in incs:
            cum = self.dcgm_counters[m][None] + np.cumsum(inc, axis=0)
            self.dcgm_counters[m] = cum[-1]
            v[:, :, m] = cum
        for m in (i for i, (name, _, _) in enumerate(self.metrics) if "NVLINK" in name):
            v[:, no_nvlink, m] = np.nan
        for m in range(len(DCGM), len(self.metrics)):  # opt-in fields only where the exporter has them
            name = self.metrics[m][0]
            v[:, [k for k in range(N) if name not in self.opt[k]], m] = np.nan
        v = np.where(lost[:, :, None, :], np.nan, v)
        v[silent] = np.nan
        pair = self.holder[r0:r1].astype(np.int64) * N + np.arange(N)[None, :]
        pidx = np.vectorize(self.pair_index.__getitem__, otypes=[np.int64])(pair) if pair.size else pair
        prefix = self.dcgm_table[pidx]  # (R, N, M, G)
        return _Family(v, prefix, self.dcgm_headers, np.array([x[2] for x in self.metrics]), self._ts(r0, r1, 1))

    def _clock_events(self, v: np.ndarray, util: np.ndarray, reasons: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """Field 112 (an idle GPU reports GPU_IDLE), the violation counters' increments (ns), and the exporter's
        count of each set bit over its window (absent while 0)."""
        D = self.D
        bits = np.where(util <= 5, 0x1, reasons)
        for name in ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"):
            v[:, :, D[name]] = bits
        step = self.interval * 1e9
        power = np.where(bits & (0x4 | 0x80), step * 0.85, 0.0)
        thermal = np.where(bits & (0x20 | 0x40), step * 0.6, 0.0) + np.where(bits & 0x8, step * 0.2, 0.0)
        hist = np.concatenate([self.reason_hist, bits])
        W = self.reason_window
        exp0 = D["DCGM_EXP_CLOCK_EVENTS_COUNT"]
        R = bits.shape[0]
        for b, (mask, _) in enumerate(CLOCK_EVENTS):
            seen = np.cumsum(np.concatenate([np.zeros((1, *bits.shape[1:])), (hist & mask) > 0]), axis=0)
            off = len(self.reason_hist)
            count = np.stack([seen[off + r + 1] - seen[max(0, off + r + 1 - W)] for r in range(R)])
            v[:, :, exp0 + b] = np.where(count > 0, count, np.nan)
        self.reason_hist = hist[-W:]
        return [(D["DCGM_FI_DEV_POWER_VIOLATION"], power), (D["DCGM_FI_DEV_THERMAL_VIOLATION"], thermal)]

    def _ib_setup(self) -> None:
        Dv = len(IB_DEVICES)
        table = np.zeros((self.n, len(IB), Dv), dtype=np.int32)
        for k, node in enumerate(self.nodes):
            for m, (name, _, _) in enumerate(IB):
                for d, dev in enumerate(IB_DEVICES):
                    table[k, m, d] = self._prefix(f'{name}{{device="{dev}",port="1",job="node-exporter",'
                                                  f'instance="{node.ip}:9100"}}')
        self.ib_table = table
        self.ib_headers = np.array([self._header(n, ty) for n, ty, _ in IB], dtype=np.int32)
        self.ib_counters = np.zeros((self.n, len(IB), Dv))
        self.ib_counters[:, 3:5] = self.rng.integers(10**12, 10**13, (self.n, 2, Dv))
        self.ib_counters[:, 8] = self.rng.integers(0, 10**6, (self.n, Dv))

    def _ib(self, r0: int, r1: int) -> _Family:
        rng, N, Dv = self.rng, self.n, len(IB_DEVICES)
        R = r1 - r0
        t = self.t[r0:r1]
        traffic = self.bw[r0:r1][:, :, None] * 1.1e10 * (1 + rng.normal(0, 0.03, (R, N, Dv)))
        state = np.full((R, N, Dv), 4.0)
        phys = np.full((R, N, Dv), 5.0)
        inc = np.zeros((R, N, len(IB), Dv))
        for f in self.faults:
            if f.kind != "ib_flap":
                continue
            k, d = f.node.index, f.device or 0
            on = (t >= f.at) & (t < (f.until if f.until is not None else np.inf))
            down = on & ((np.arange(r0, r1) % 4) == 0)
            state[down, k, d] = 1
            phys[down, k, d] = 6
            traffic[on, k, d] *= 0.35
            traffic[down, k, d] = 0
            inc[on, k, 5, d] = rng.poisson(180, int(on.sum()))
            inc[down, k, 6, d] = 1
            inc[down & ((np.arange(r0, r1) % 8) == 0), k, 7, d] = 1
        inc[:, :, 3] = traffic * self.interval
        inc[:, :, 4] = traffic * self.interval * 0.98
        inc[:, :, 8] = rng.poisson(3, (R, N, Dv)) + traffic * 1e-7
        cum = self.ib_counters[None] + np.cumsum(inc, axis=0)
        self.ib_counters = cum[-1]
        v = np.round(cum)
        v[:, :, 0] = state
        v[:, :, 1] = phys
        v[:, :, 2] = IB_RATE
        v[self.down[r0:r1]] = np.nan  # a lost node's node_exporter is silent too
        prefix = np.broadcast_to(self.ib_table, (R, *self.ib_table.shape))
        return _Family(v, prefix, self.ib_headers, np.array([x[2] for x in IB]), self._ts(r0, r1, 2))

    def _kueue_setup(self) -> None:
        self.cqs = ("team-a-cq", "team-b-cq", "team-c-cq")
        inst = 'job="kueue",instance="kueue-controller-manager-metrics-service.kueue-system.svc:8443"'
        rows: list[tuple[str, str, str, bool]] = []  # (metric name, type, labels, int)
        for cq in self.cqs:
            for status in ("active", "inadmissible"):
                rows.append(("kueue_pending_workloads", "gauge",
                             f'cluster_queue="{cq}",status="{status}",replica_role="leader",{inst}', True))
        for cq in self.cqs:
            rows.append(("kueue_admitted_active_workloads", "gauge", f'cluster_queue="{cq}",replica_role="leader",'
                         f"{inst}", True))
        for cq in self.cqs:
            for reason, cause in EVICTION_REASONS:
                rows.append(("kueue_evicted_workloads_total", "counter", f'cluster_queue="{cq}",reason="{reason}",'
                             f'underlying_cause="{cause}",priority_class="",replica_role="leader",{inst}', True))
        for cq in self.cqs:
            lab = f'cluster_queue="{cq}",priority_class="",replica_role="leader",{inst}'
            for le in [*WAIT_BUCKETS, float("inf")]:
                les = "+Inf" if le == float("inf") else _fmt_le(le)
                rows.append(("kueue_admission_wait_time_seconds_bucket", "histogram", f'{lab},le="{les}"', True))
            rows.append(("kueue_admission_wait_time_seconds_sum", "histogram", lab, False))
            rows.append(("kueue_admission_wait_time_seconds_count", "histogram", lab, True))
        if self.scn.variant.startswith("1.37"):
            # Kueue in HA: the follower exports its (stale) gauges too, replica_role="follower".
            fol = 'job="kueue",instance="kueue-controller-manager-1.kueue-system.pod:8443"'
            rows += [(n, ty, lab.replace('replica_role="leader"', 'replica_role="follower"').replace(inst, fol), i)
                     for n, ty, lab, i in rows if n == "kueue_pending_workloads"]
        self.kueue_rows = rows
        fams = []
        for name, ty, _, _ in rows:
            fam = name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") \
                if ty == "histogram" else name
            if fam not in fams:
                fams.append(fam)
        self.kueue_fams = fams
        self.kueue_fam_of = [fams.index(n.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
                              if ty == "histogram" else n) for n, ty, _, _ in rows]
        types = {self.kueue_fam_of[i]: rows[i][1] for i in range(len(rows))}
        self.kueue_headers = np.array([self._header(f, types[i]) for i, f in enumerate(fams)],
                                      dtype=np.int32)
        width = max(self.kueue_fam_of.count(i) for i in range(len(fams)))
        self.kueue_width = width
        table = np.full((len(fams), width), -1, dtype=np.int32)
        slot = [0] * len(fams)
        self.kueue_slot = []
        for i, (name, _, lab, _) in enumerate(rows):
            f = self.kueue_fam_of[i]
            table[f, slot[f]] = self._prefix(f"{name}{{{lab}}}")
            self.kueue_slot.append((f, slot[f]))
            slot[f] += 1
        self.kueue_table = table

    def _kueue(self, r0: int, r1: int) -> _Family:
        R = r1 - r0
        F, W = self.kueue_table.shape
        v = np.full((R, 1, F, W), np.nan)
        kueue_jobs = [j for j in self.scn.jobs if j.kueue]
        for ri, r in enumerate(range(r0, r1)):
            t = self.t[r]
            vals: list[float] = []
            for cq in self.cqs:
                mine = [j for j in kueue_jobs if j.cq == cq and j.created <= t and (j.deleted is None or t < j.deleted)]
                waiting = [j for j in mine if _pending_at(j, t, self.scn.duration)]
                inadm = [j for j in waiting if j.pending is not None]
                vals += [len(waiting) - len(inadm), len(inadm)]
            for cq in self.cqs:
                vals.append(sum(1 for j in kueue_jobs if j.cq == cq and _admitted_at(j, t, self.scn.duration)))
            for cq in self.cqs:
                for reason, _ in EVICTION_REASONS:
                    vals.append(sum(1 for j in kueue_jobs if j.cq == cq for ev, _, why in j.evictions(self.scn.duration)
                                    if why == reason and ev <= t))
            for cq in self.cqs:
                waits = [w for j in kueue_jobs if j.cq == cq for w in _admission_waits(j, t, self.scn.duration)]
                vals += [sum(1 for w in waits if w <= le) for le in WAIT_BUCKETS] + [len(waits)]
                vals += [round(sum(waits), 3), len(waits)]
            vals += vals[:len(self.kueue_rows) - len(vals)]  # the HA follower's pending gauges (same values)
            for i, x in enumerate(vals):
                f, s = self.kueue_slot[i]
                v[ri, 0, f, s] = x
        prefix = np.broadcast_to(np.maximum(self.kueue_table, 0)[None, None], (R, 1, F, W))
        is_int = np.ones(F, dtype=bool)
        fam = _Family(v, prefix, self.kueue_headers, is_int, self._ts(r0, r1, 0))
        fam.float_slots = {(f, s) for i, (f, s) in enumerate(self.kueue_slot) if not self.kueue_rows[i][3]}
        return fam

    def _train_setup(self) -> None:
        self.train_prefix = []
        for j, _, _, _ in self.jobs_active:
            ip = f"192.168.{j.nodes[0].index % 256}.10:8000"
            name = THROUGHPUT_TOTAL if j.counter else THROUGHPUT
            self.train_prefix.append(tuple(
                self._prefix(f'{name}{{namespace="{j.namespace}",pod="{p}",job="training",instance="{ip}"}}')
                for p in (j.pod_names[0], j.pod_names2[0])))
        self.train_header = np.array([self._header(THROUGHPUT, "gauge"), self._header(THROUGHPUT_TOTAL, "counter")],
                                     dtype=np.int32)
        self.train_total = np.zeros(len(self.jobs_active))

    def _train(self, r0: int, r1: int) -> _Family:
        """The rank-0 pod's tokens/s gauge, or (``SimJob.counter``) its tokens counter, while the loop runs."""
        R, J = r1 - r0, len(self.jobs_active)
        v = np.full((R, J, 2, 1), np.nan)
        prefix = np.zeros((R, J, 2, 1), dtype=np.int32)
        t = self.t[r0:r1]
        for ji, (j, active, factor, reported) in enumerate(self.jobs_active):
            tps = j.tps_per_gpu * j.pods * j.gpus_per_pod * factor[r0:r1]
            tps = np.maximum(tps * (1 + self.rng.normal(0, 0.025, R)), 0)
            rerun = (t >= j.rerun) if j.rerun is not None else np.zeros(R, dtype=bool)
            pref = np.where(rerun, self.train_prefix[ji][1], self.train_prefix[ji][0])
            if j.counter:  # tokens since the process started
                total = self.train_total[ji] + np.cumsum(np.where(active[r0:r1], tps * self.interval, 0.0))
                self.train_total[ji] = total[-1]
                v[:, ji, 1, 0] = np.where(reported[r0:r1], np.round(total), np.nan)
                prefix[:, ji, 1, 0] = pref
            else:
                v[:, ji, 0, 0] = np.where(reported[r0:r1], np.round(tps, 1), np.nan)
                prefix[:, ji, 0, 0] = pref
        return _Family(v, prefix, self.train_header, np.array([False, True]), self._ts(r0, r1, 3))

    # --- timing and output -----------------------------------------------------------------------------------------

    def _ts(self, r0: int, r1: int, kind: int) -> np.ndarray:
        """Scrape time of each (round, target) block: per-kind window, per-target offset, jitter."""
        windows = {0: (200, 800), 1: (1000, 6000), 2: (7000, 4000), 3: (11500, 3000)}
        lo, span = windows[kind]
        count = {0: 1, 1: self.n, 2: self.n, 3: max(1, len(self.jobs_active))}[kind]
        step = span // count
        offs = lo + np.arange(count) * step
        jitter = self.rng.integers(0, max(1, int(step * 0.8)), (r1 - r0, count))
        base = self.start_ms + (np.arange(r0, r1) * int(self.interval * 1000))[:, None]
        return base + offs[None, :] + jitter

    def write(self, path: Path, chunk_rounds: int = 40, since: float = 0.0) -> int:
        self._dcgm_setup()
        self._ib_setup()
        self._kueue_setup()
        self._train_setup()
        # Categorical: a row's label prefix is a 4-byte code until the CSV writer expands it.
        table = pl.Series("p", self.prefixes, dtype=pl.String).cast(pl.Categorical)
        htext = pl.Series("t", self.header_text, dtype=pl.String)
        with path.open("wb") as f:
            for r0 in range(min(self.rounds, int(-(-since // self.interval))), self.rounds, chunk_rounds):
                r1 = min(self.rounds, r0 + chunk_rounds)
                fams = [self._kueue(r0, r1), self._dcgm(r0, r1), self._ib(r0, r1)]
                if self.jobs_active:
                    fams.append(self._train(r0, r1))
                self._write_chunk(f, fams, table, htext, r1 - r0)
        return self.samples

    def _write_chunk(self, f: io.BufferedWriter, fams: list[_Family], table: pl.Series, htext: pl.Series,
                     R: int) -> None:
        cols = [_rows(fam) for fam in fams]  # each: dict of arrays with a 'round' column
        # interleave: round by round, families in scrape-window order
        order = []
        offset = 0
        starts = []
        for c in cols:
            starts.append(offset)
            offset += len(c["round"])
        bounds = [np.searchsorted(c["round"], np.arange(R + 1)) for c in cols]
        for r in range(R):
            for fi in range(len(cols)):
                lo, hi = bounds[fi][r], bounds[fi][r + 1]
                if hi > lo:
                    order.append(np.arange(starts[fi] + lo, starts[fi] + hi))
        if not order:
            return
        idx = np.concatenate(order)
        cat = {k: np.concatenate([c[k] for c in cols])[idx] for k in ("prefix", "value", "ts", "is_int", "header")}
        self.samples += int((~cat["header"]).sum())
        codes = pl.Series(cat["prefix"], dtype=pl.UInt32)
        df = pl.DataFrame({"p": table.gather(codes), "t": htext.gather(codes), "v": cat["value"], "ts": cat["ts"],
                           "i": cat["is_int"], "h": cat["header"]})
        val = pl.when(pl.col("i")).then(pl.col("v").cast(pl.Int64).cast(pl.String)).otherwise(
            pl.col("v").cast(pl.String))
        # "<name>{labels}" SP "<value> <ts>", or "# TYPE" SP "<name> <type>": the CSV separator is the space.
        out = df.select("p", pl.when(pl.col("h")).then(pl.col("t"))
                        .otherwise(pl.concat_str([val, pl.lit(" "), pl.col("ts").cast(pl.String)])).alias("v"))
        buf = io.BytesIO()
        out.write_csv(buf, include_header=False, quote_style="never", separator=" ")
        f.write(buf.getbuffer())


def _rows(fam: _Family) -> dict[str, np.ndarray]:
    """Flatten a family to rows in (round, target, metric, [header, series...]) order, absent samples dropped."""
    R, T, M, S = fam.values.shape
    present = ~np.isnan(fam.values)
    head_present = present.any(axis=3)  # (R, T, M)
    if (fam.header < 0).any():  # a metric continuing the previous one's block: one # TYPE line for both
        for m in range(1, M):
            if fam.header[m] < 0:
                owner = m - 1
                while fam.header[owner] < 0:
                    owner -= 1
                head_present[..., owner] |= head_present[..., m]
                head_present[..., m] = False
    vals = np.concatenate([np.zeros((R, T, M, 1)), np.nan_to_num(fam.values)], axis=3)
    keep = np.concatenate([head_present[..., None], present], axis=3)
    heads = np.maximum(fam.header, 0)
    pref = np.concatenate([np.broadcast_to(heads[None, None, :, None], (R, T, M, 1)), fam.prefix], axis=3)
    is_int = np.broadcast_to(fam.is_int[None, None, :, None], (R, T, M, S + 1)).copy()
    for fs in getattr(fam, "float_slots", ()):
        is_int[:, :, fs[0], fs[1] + 1] = False
    header = np.zeros((R, T, M, S + 1), dtype=bool)
    header[..., 0] = True
    ts = np.broadcast_to(fam.ts[:, :, None, None], (R, T, M, S + 1))
    rnd = np.broadcast_to(np.arange(R)[:, None, None, None], (R, T, M, S + 1))
    k = keep.reshape(-1)
    return {"round": rnd.reshape(-1)[k], "prefix": pref.reshape(-1)[k], "value": vals.reshape(-1)[k],
            "ts": ts.reshape(-1)[k], "is_int": is_int.reshape(-1)[k], "header": header.reshape(-1)[k]}


def _fmt_le(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)


def _pending_at(j: SimJob, t: float, duration: float) -> bool:
    if j.pending is not None:
        return True
    if j.admitted is not None and j.created <= t < j.admitted:
        return True
    return any(ev <= t < (back if back is not None else float("inf")) for ev, back, _ in j.evictions(duration))


def _admitted_at(j: SimJob, t: float, duration: float) -> bool:
    if j.admitted is None or t < j.admitted or _pending_at(j, t, duration):
        return False
    return j.finished is None or t < j.finished


def _admission_waits(j: SimJob, t: float, duration: float) -> list[float]:
    out = []
    if j.admitted is not None and j.pending is None and j.admitted <= t:
        out.append(j.admitted - j.created)
    out += [back - ev for ev, back, _ in j.evictions(duration) if back is not None and back <= t]
    return out


def _stable_hash(s: str) -> int:
    h = 0
    for ch in s.encode():
        h = (h * 131 + ch) % (2**61 - 1)
    return h


def write(scn: Scenario, path: Path, start: datetime, interval: float = 15.0, seed: int = 0,
          since: float = 0.0) -> int:
    """Write ``metrics.prom`` (scrapes from ``since`` seconds on); returns the number of samples."""
    return Writer(scn, start, interval, seed).write(path, since=since)
