"""Remote-write request bodies as Prometheus sends them, for the tests and bench/remote_write.py."""

from __future__ import annotations

from collections.abc import Iterable

import cramjam

from collectors.prom.remote_write import WriteRequest

# The headers Prometheus sends with a remote-write 1.0 request.
HEADERS = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}

Series = tuple[dict[str, str], list[tuple[float, int]]]  # labels (with __name__), [(value, timestamp ms)]


def write_request_body(series: Iterable[Series]) -> bytes:
    """One snappy-compressed WriteRequest (remote write 1.0), labels sorted by name as Prometheus sorts them."""
    req = WriteRequest()
    for labels, samples in series:
        ts = req.timeseries.add()
        for k in sorted(labels):
            ts.labels.add(name=k, value=labels[k])
        for value, at in samples:
            ts.samples.add(value=value, timestamp=at)
    return bytes(cramjam.snappy.compress_raw(req.SerializeToString()))
