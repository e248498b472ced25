"""Backfill from Prometheus: a past window of the series gangscope uses, as the raw samples Prometheus stored.

Each selector is read window by window with an instant query of a range vector
(``{selector}[<window>]`` at the window's end, ``/api/v1/query``): that returns every stored
sample with its own timestamp, exactly what remote write would have sent, where
``query_range`` would return values re-sampled at the step (and invent points through
the 5-minute lookback). Samples are kept in ``(window start, window end]`` so adjacent windows
never overlap, whichever way the Prometheus version closes range selectors.

The window is the edge time sanity applies to (gangscope/timesanity.py): a start or end before 2000,
further than ``clock_skew_s`` in the future, or not in milliseconds is a ``UserError`` before any query
(a window up to year 9999 would otherwise be millions of queries); every sample read is inside it.

Samples become one ``ScrapeBatch`` per (job, instance, timestamp) as a replay file's do,
labels as stored, ``job``/``instance`` as the batch's columns (``prometheus`` when absent,
as in remote write). Authentication and TLS like scrape targets: bearer token file, basic
auth (password from a file), CA / client certificate, or no verification.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from collectors.prom import DEFAULT_JOB
from gangscope.errors import UserError
from gangscope.records import ScrapeBatch
from gangscope.timesanity import DEFAULT_SKEW_S, check_ms

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """A Prometheus server to read from (``url`` is its base, e.g. ``https://prom.example:9090``)."""

    url: str
    bearer_token_file: str | None = None
    username: str | None = None
    password_file: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure_skip_verify: bool = False
    timeout_s: float = 120.0

    def _headers(self) -> dict[str, str]:
        # Files are read per request (rotated tokens); their content is never logged.
        if self.bearer_token_file:
            with open(self.bearer_token_file) as f:
                return {"Authorization": f"Bearer {f.read().strip()}"}
        if self.username is not None:
            password = ""
            if self.password_file:
                with open(self.password_file) as f:
                    password = f.read().rstrip("\n")
            cred = base64.b64encode(f"{self.username}:{password}".encode()).decode()
            return {"Authorization": f"Basic {cred}"}
        return {}

    def _ssl(self) -> ssl.SSLContext | None:
        if not self.url.startswith("https"):
            return None
        if self.insecure_skip_verify:
            return ssl._create_unverified_context()  # noqa: S323 - the user asked for it
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def query(self, expr: str, at_ms: int) -> list[dict]:
        """Result of an instant query at ``at_ms``; ``UserError`` naming the server (never the credentials)."""
        params = urllib.parse.urlencode({"query": expr, "time": f"{at_ms / 1000:.3f}"})
        req = urllib.request.Request(f"{self.url.rstrip('/')}/api/v1/query", data=params.encode(),
                                     headers={**self._headers(), "Content-Type": "application/x-www-form-urlencoded"})
        where = redacted(self.url)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self._ssl()) as r:
                doc = json.load(r)
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode(errors="replace")
            raise UserError(f"prometheus {where}: HTTP {e.code} for {expr}: {detail}") from None
        except (OSError, ValueError) as e:
            raise UserError(f"prometheus {where}: {type(e).__name__}: {e}") from None
        if doc.get("status") != "success" or doc.get("data", {}).get("resultType") != "matrix":
            raise UserError(f"prometheus {where}: unexpected answer for {expr}: {str(doc)[:300]}")
        return doc["data"]["result"]


def redacted(url: str) -> str:
    """``url`` without user:password@ (for messages and logs)."""
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()


def signal_selector(entries: Sequence[dict]) -> str:
    """One selector for the signal map's metric names (``pipeline.signals.signal_map`` entries)."""
    parts = []
    for e in entries:
        m = e["metric"]
        if e["match"] == "exact":
            parts.append(_re_escape(m))
        elif e["match"] == "regex":
            parts.append(f"(?:{m})")
        else:
            parts.append(f".*{_re_escape(m)}")
    alternatives = "|".join(dict.fromkeys(parts))
    return '{__name__=~"' + alternatives.replace("\\", "\\\\").replace('"', '\\"') + '"}'


def _re_escape(name: str) -> str:
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in name)


def read_window(source: Source, selectors: Sequence[str], start_ms: int, end_ms: int, cluster: str,
                window_ms: int = 600_000, skew_s: float = DEFAULT_SKEW_S) -> Iterator[ScrapeBatch]:
    """Samples of ``selectors`` with ``start_ms <= ts <= end_ms``, window by window in time order (the window is
    checked here, at the call, not at the first sample)."""
    now_ms = int(time.time() * 1000)
    for what, ts in (("start", start_ms), ("end", end_ms)):
        if why := check_ms(f"backfill: {what}", ts, now_ms, skew_s):
            raise UserError(why)
    if end_ms < start_ms:
        raise UserError("backfill: --end is before --start")
    return _read(source, selectors, start_ms, end_ms, cluster, window_ms)


def _read(source: Source, selectors: Sequence[str], start_ms: int, end_ms: int, cluster: str,
          window_ms: int) -> Iterator[ScrapeBatch]:
    lo = start_ms - 1
    while lo < end_ms:
        hi = min(lo + window_ms, end_ms)
        batches: dict[tuple[str, str, int], ScrapeBatch] = {}
        seen: set[frozenset[tuple[str, str]]] = set()  # a series two selectors match is read once
        for sel in selectors:
            for series in source.query(f"{sel}[{hi - lo}ms]", hi):
                key = frozenset(series["metric"].items())
                if key in seen:
                    continue
                seen.add(key)
                labels = dict(series["metric"])
                name = labels.pop("__name__", "")
                if not name:
                    continue  # a selector that matched something computed, not stored series
                job = labels.pop("job", "") or DEFAULT_JOB
                instance = labels.pop("instance", "") or DEFAULT_JOB
                index: dict[int, int] = {}  # batch id -> this series' index in it
                for t, v in series["values"]:
                    ts = round(float(t) * 1000)
                    if not lo < ts <= hi:
                        continue
                    b = batches.get((job, instance, ts))
                    if b is None:
                        b = batches[(job, instance, ts)] = ScrapeBatch(cluster=cluster, target=instance, job=job,
                                                                       instance=instance, scraped_at_ms=ts)
                    i = index.get(id(b))
                    if i is None:
                        i = index[id(b)] = b.add_series(name, labels)
                    b.add_sample(i, float(v), ts)
        log.info("backfill: %d samples between %d and %d", sum(len(b.sample_value) for b in batches.values()),
                 lo + 1, hi)
        yield from sorted(batches.values(), key=lambda b: (b.scraped_at_ms, b.job, b.instance))
        lo = hi
