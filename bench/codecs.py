"""Producer codecs compared on gangscope's own records: CPU to compress, CPU to read back, bytes on the wire.

Usage: ``python bench/codecs.py [--records N] [--repeat R]``. Builds Kafka record batches exactly as
kafka-python's producer does (``MemoryRecordsBuilder``, magic 2, 1 MiB batches, the realistic 8-GPU
dcgm-exporter scrapes of bench/ingest.py), once per codec, and reads them back as the consumer does
(CRC-32C check, decompression, every record's value). CPU is this process's CPU time (medians of R
runs), so other processes' load on the machine counts less than in wall-clock figures. ``none`` is
the baseline: the codec's own cost is a row's figure minus ``none``'s. Prints one line per codec and
says whether the ``crc32c`` package (C CRC-32C; kafka-python falls back to pure Python) is in use.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest import scrapes  # noqa: E402
from kafka.record import util as record_util  # noqa: E402
from kafka.record.default_records import DefaultRecordBatch  # noqa: E402
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder  # noqa: E402

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # Kafka's attribute codes
BATCH = 1 << 20  # the producer's batch_size (gangscope/transport/kafka.py)


def records(n: int, noisy: bool) -> list[tuple[bytes, bytes]]:
    """bench/ingest.py's scrapes; ``noisy``: every value random with 3 decimals (bench/ingest.py's values
    cycle through 100 steps, which compresses far better than real gauges and counters do)."""
    rng = random.Random(7)
    out = []
    for b in scrapes(n):
        if noisy:
            b.sample_value[:] = [round(rng.uniform(0, 400), 3) for _ in b.sample_value]
        out.append((b.key(), b.to_bytes()))
    return out


def build(recs: list[tuple[bytes, bytes]], code: int) -> list[bytearray]:
    batches, builder = [], MemoryRecordsBuilder(2, code, BATCH)
    for key, value in recs:
        if builder.append(0, key, value) is None:
            builder.close()
            batches.append(builder.buffer())
            builder = MemoryRecordsBuilder(2, code, BATCH)
            assert builder.append(0, key, value) is not None
    builder.close()
    batches.append(builder.buffer())
    return batches


def read(batches: list[bytearray]) -> int:
    n = 0
    for buf in batches:
        mr = MemoryRecords(bytes(buf))
        while (batch := mr.next_batch()) is not None:
            assert isinstance(batch, DefaultRecordBatch) and batch.validate_crc()
            for r in batch:
                n += len(r.value)
    return n


def cpu(fn, *args):
    t = time.process_time()
    out = fn(*args)
    return time.process_time() - t, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2000, help="scrape records (200 samples each; default 2000)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--codecs", default="none,gzip,lz4,zstd,snappy")
    ap.add_argument("--noisy", action="store_true", help="random values instead of bench/ingest.py's cycling ones")
    ap.add_argument("--pure-python-crc", action="store_true", help="use kafka-python's CRC-32C fallback")
    args = ap.parse_args()
    if args.pure_python_crc:
        record_util.calc_crc32c.__defaults__ = (record_util.crc32c_py,)
    recs = records(args.records, args.noisy)
    samples = args.records * 200
    raw = sum(len(v) for _, v in recs)
    c_crc = record_util.crc32c_c is not None and not args.pure_python_crc
    print(f"{args.records} records, {samples} samples, {raw / 1e6:.1f} MB of JSON values "
          f"({'noisy' if args.noisy else 'cycling'} values); "
          f"CRC-32C in {'C (crc32c package)' if c_crc else 'pure Python (no crc32c package)'}")
    for name in args.codecs.split(","):
        try:
            build(recs[:1], CODECS[name])
        except Exception as e:  # the codec's Python package is missing
            print(f"codec {name}: not available ({type(e).__name__}: {e})")
            continue
        enc, dec = [], []
        for _ in range(args.repeat):
            s, batches = cpu(build, recs, CODECS[name])
            enc.append(s)
            s, n = cpu(read, batches)
            dec.append(s)
            assert n == raw
        wire = sum(len(b) for b in batches)
        med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        print(f"codec {name}: compress {med(enc) / samples * 1e9:.0f} ns/sample, read back "
              f"{med(dec) / samples * 1e9:.0f} ns/sample, wire {wire / samples:.2f} bytes/sample "
              f"({raw / wire:.1f}x smaller than the JSON)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
