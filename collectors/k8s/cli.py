"""``gangscope collect k8s`` and ``gangscope capture k8s``."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", metavar="FILE",
                   help="kubeconfig file (default $KUBECONFIG or ~/.kube/config; in a pod: the service account)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current context)")


def register(groups: dict[str, Any], common: argparse.ArgumentParser) -> None:
    p = groups["group"]("collect", "run one collector live").add_parser(
        "k8s", parents=[common], help="watch the cluster and publish to Kafka",
        description="List+watch Pods, Nodes, Events, Kueue, PodGroup and scheduling.k8s.io objects (whichever "
        "the API server serves; re-discovered every k8s.discovery_interval_s) and publish every change to the "
        "<prefix>k8s topic. Resumes broken watches; relists on 410 Gone. Stops on SIGINT/SIGTERM.",
    )
    _cluster_args(p)
    p.set_defaults(handler=collect)

    c = groups["group"]("capture", "record live inputs to replay files").add_parser(
        "k8s", parents=[common], help="record the cluster's watch events to a JSON Lines replay file",
        description="Watch the cluster like `collect k8s` but write every event to FILE in the watch JSON Lines "
        "format with observedAt, for `gangscope replay --k8s FILE`.",
    )
    _cluster_args(c)
    c.add_argument("--out", metavar="FILE", required=True, help="file to write (overwritten)")
    c.add_argument("--duration", metavar="D", help="stop after D (e.g. 90s, 15m, 2h); default: until Ctrl-C")
    c.set_defaults(handler=capture)


def _client(settings: Any, args: argparse.Namespace) -> Any:
    from collectors.k8s.client import Client

    return Client.from_config(args.kubeconfig or settings.k8s.kubeconfig, args.context or settings.k8s.context)


def collect(settings: Any, args: argparse.Namespace) -> int:
    import threading

    from collectors.k8s.capture import stop_on_signals
    from collectors.k8s.collector import K8sCollector, locked
    from gangscope.transport.broker import bootstrap_servers
    from gangscope.transport.publish import Publisher

    client = _client(settings, args)
    stop = threading.Event()
    with bootstrap_servers(settings) as bootstrap:
        publisher = Publisher(settings, bootstrap)
        try:
            with stop_on_signals(stop):
                K8sCollector(settings, client, locked(publisher.publish)).run(stop)
        finally:
            publisher.close(timeout_s=30.0)  # flushes; logs what Kafka did not take in time
    return 0


def capture(settings: Any, args: argparse.Namespace) -> int:
    from pathlib import Path

    from collectors.k8s.capture import capture as run_capture
    from collectors.k8s.capture import parse_duration

    duration = parse_duration(args.duration) if args.duration else None
    n = run_capture(settings, _client(settings, args), Path(args.out), duration)
    print(f"capture: {n} events written to {args.out}", file=sys.stderr)
    return 0
