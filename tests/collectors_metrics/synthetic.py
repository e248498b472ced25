"""Synthetic dcgm-exporter scrapes of an 8-GPU H100 node, shaped like the real L4 sample.

Same 25 default fields, label order and value formatting as dcgm-exporter (doubles with
6 decimals), H100 model name, NVLink bandwidth present, pod labels only on allocated GPUs.
"""

from __future__ import annotations

import random
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "telemetry"
L4_SAMPLE = REFERENCE / "dcgm-exporter_metrics_sample_L4_gpu-operator.prom"
IB_SAMPLE = REFERENCE / "node_exporter_e2e-output_infiniband-excerpt.prom"


def reference_text(path: Path) -> str:
    """A real exporter listing from tests/fixtures/reference (its source: telemetry/SOURCES.md there)."""
    return path.read_text()

# (name, type, help, kind of value) in the order of dcgm-exporter's default-counters.csv
FIELDS = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "int"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "int"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "int"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "int"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "double"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", "int"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "int"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "int"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "int"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "int"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "int"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "int"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "int"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "int"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "int"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes.",
     "int"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", "int"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors", "int"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors", "int"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "int"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "double"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "double"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active sending or "
     "receiving data.", "double"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both "
     "protocol headers and data payloads - in bytes per second.", "int"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both protocol "
     "headers and data payloads - in bytes per second.", "int"),
]


def h100_scrape(host: str, gpus: int = 8, seed: int = 0, pods: dict[int, tuple[str, str]] | None = None,
                hostname_key: str = "Hostname") -> str:
    """One dcgm-exporter scrape of ``host``; ``pods`` maps GPU index to (namespace, pod)."""
    rnd = random.Random(f"{host}/{seed}")
    pods = pods if pods is not None else {g: ("team-a", f"llm-train-worker-{g // 4}") for g in range(4)}
    out: list[str] = []
    uuids = [f"GPU-{rnd.getrandbits(32):08x}-{rnd.getrandbits(16):04x}-{rnd.getrandbits(16):04x}-"
             f"{rnd.getrandbits(16):04x}-{rnd.getrandbits(48):012x}" for _ in range(gpus)]
    for name, typ, doc, kind in FIELDS:
        out.append(f"# HELP {name} {doc}")
        out.append(f"# TYPE {name} {typ}")
        for g in range(gpus):
            labels = (f'gpu="{g}",UUID="{uuids[g]}",pci_bus_id="00000000:{0x18 + g * 0x10:02X}:00.0",'
                      f'device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",{hostname_key}="{host}",'
                      f'DCGM_FI_DRIVER_VERSION="580.105.08"')
            if g in pods:
                ns, pod = pods[g]
                labels += f',container="main",namespace="{ns}",pod="{pod}",pod_uid=""'
            v = rnd.random() * 1000
            value = f"{v:f}" if kind == "double" else str(int(v * 1000))
            out.append(f"{name}{{{labels}}} {value}")
    return "\n".join(out) + "\n"
