"""The simulated cluster's hardware: GPU nodes in racks in blocks, and the Node objects.

Labels follow Kueue's kind TAS example (``reference/kueue/kind-cluster-node-topology-labels.yaml``):
block, rack and hostname levels. Rack names are unique across blocks (``rack-3`` sits in exactly one
block) so a domain can be named by its lowest label alone.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

BLOCK_LABEL = "cloud.provider.com/topology-block"
RACK_LABEL = "cloud.provider.com/topology-rack"
HOST_LABEL = "kubernetes.io/hostname"
NODE_GROUP_LABEL = "cloud.provider.com/node-group"
LEVELS = (BLOCK_LABEL, RACK_LABEL, HOST_LABEL)

GPUS_PER_NODE = 8
NODES_PER_RACK = 4
RACKS_PER_BLOCK = 2
IB_DEVICES = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
# Real H100/H200 SXM PCI bus ids of the eight GPUs on an HGX board.
PCI_BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
DEDICATED_TAINT = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@dataclass
class Node:
    index: int
    name: str
    block: str
    rack: str
    ip: str
    model: str
    uid: str
    gpu_uuids: list[str]
    taints: list[dict[str, str]] = field(default_factory=list)
    # dcgm-exporter's counters on this node: "default" (default-counters.csv: no clock-event or violation fields),
    # "clock_events" (opt-in DCGM_FI_DEV_CLOCKS_EVENT_REASONS, *_VIOLATION, DCGM_EXP_CLOCK_EVENTS_COUNT) or
    # "throttle_reasons" (a DCGM 3.x CSV: the deprecated DCGM_FI_DEV_CLOCK_THROTTLE_REASONS and *_VIOLATION)
    dcgm: str = "default"

    @property
    def pci_bus_ids(self) -> list[str]:
        return [f"00000000:{b}:00.0" for b in PCI_BUS_IDS]


@dataclass
class Cluster:
    nodes: list[Node]

    def racks(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            out.setdefault(n.rack, []).append(n)
        return out

    def blocks(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            out.setdefault(n.block, []).append(n)
        return out

    @property
    def gpus(self) -> int:
        return len(self.nodes) * GPUS_PER_NODE


def det_uuid(rng: random.Random) -> str:
    """A random-looking UUID drawn from the scenario's generator (never from the OS)."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def build(n_nodes: int, rng: random.Random) -> Cluster:
    if n_nodes < 4:
        raise ValueError("the simulator needs at least 4 nodes")
    nodes = []
    for i in range(n_nodes):
        rack = i // NODES_PER_RACK
        block = rack // RACKS_PER_BLOCK
        name = f"gpu-node-{i + 1:03d}"
        nodes.append(Node(
            index=i, name=name, block=f"block-{block + 1}", rack=f"rack-{rack + 1}",
            ip=f"10.{block}.{rack % 256}.{10 + i % NODES_PER_RACK}", model=MODELS[block % 2],
            uid=det_uuid(rng), gpu_uuids=[f"GPU-{det_uuid(rng)}" for _ in range(GPUS_PER_NODE)],
            taints=[dict(GPU_TAINT)],
        ))
    return Cluster(nodes)


def node_object(node: Node, created: str, heartbeat: str) -> dict[str, Any]:
    """A core/v1 Node as the API server returns it (the fields the collectors and models read)."""
    product = node.model.replace(" ", "-")
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux", HOST_LABEL: node.name, NODE_GROUP_LABEL: "tas-group",
        BLOCK_LABEL: node.block, RACK_LABEL: node.rack, "node.kubernetes.io/instance-type": "p5.48xlarge",
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "8",
    }
    cap = {"cpu": "192", "ephemeral-storage": "3750000000Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
           "memory": "2097152000Ki", "nvidia.com/gpu": "8", "pods": "110"}
    alloc = dict(cap, cpu="191450m", memory="2085000000Ki")
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node.name, "uid": node.uid, "creationTimestamp": created, "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"podCIDR": f"192.168.{node.index % 256}.0/24", "taints": [dict(t) for t in node.taints],
                 "providerID": f"aws:///us-east-1a/i-{node.uid.replace('-', '')[:17]}"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": node.ip}, {"type": "Hostname", "address": node.name}],
            "capacity": cap, "allocatable": alloc,
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available", "lastHeartbeatTime": heartbeat,
                 "lastTransitionTime": created},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                 "message": "kubelet has no disk pressure", "lastHeartbeatTime": heartbeat,
                 "lastTransitionTime": created},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                 "message": "kubelet has sufficient PID available", "lastHeartbeatTime": heartbeat,
                 "lastTransitionTime": created},
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status", "lastHeartbeatTime": heartbeat,
                 "lastTransitionTime": created},
            ],
            "nodeInfo": {"architecture": "amd64", "bootID": node.uid, "containerRuntimeVersion": "containerd://2.1.4",
                         "kernelVersion": "6.8.0-1021-aws", "kubeProxyVersion": "", "kubeletVersion": "v1.35.2",
                         "machineID": node.uid.replace("-", ""), "operatingSystem": "linux",
                         "osImage": "Ubuntu 24.04.3 LTS", "systemUUID": node.uid},
        },
    }
