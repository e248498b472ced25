"""A group member the broker gave up on must not land what the partition's new owner lands (pipeline/land.py: claim).

Met in a full test run: `gangscope pipeline` writers on a PostgreSQL catalog, one killed, and 25 Pod events landed
twice: a member still landing a batch of partitions the group had already given to another. The stored-offset check
inside the landing transaction cannot see a transaction open elsewhere; the claim makes the two conflict. Real
DuckLake on a real PostgreSQL catalog (the catalog several writers share), two connections as two writers.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gangscope import config
from pipeline import lake
from pipeline.land import claim, prepare, stored_offsets, write
from tests.pipeline.helpers import pod_event

K = "gs.k8s"


@pytest.fixture
def settings(tmp_path: Path, pg_catalog: str) -> config.Settings:
    return config.load(overrides={"data": str(tmp_path / "data"), "catalog": pg_catalog}, environ={})


def _batch(partition: int, offsets: range) -> list[tuple[str, int, int, bytes]]:
    return [(K, partition, o, pod_event(partition * 1000 + o).to_bytes()) for o in offsets]


def _landed(con: duckdb.DuckDBPyConnection) -> list[tuple[int, int, int]]:
    return con.execute("SELECT kafka_partition, kafka_offset, count(*) FROM raw.k8s_objects GROUP BY ALL "
                       "ORDER BY ALL").fetchall()


def test_a_batch_of_a_partition_claimed_since_is_left_to_its_new_owner(settings: config.Settings) -> None:
    a, b = lake.connect(settings), lake.connect(settings)
    try:
        a_claim, stored = claim(a, [(K, 0), (K, 1)], {}, "writer-a")
        assert stored == {(K, 0): 0, (K, 1): 0}
        mine = {(K, 0): a_claim, (K, 1): a_claim}
        in_hand = prepare(_batch(0, range(5)) + _batch(1, range(5)))  # read while writer-a owned both
        b_claim, stored = claim(b, [(K, 0)], {}, "writer-b")  # the group moved partition 0 to writer-b
        assert b_claim != a_claim and stored == {(K, 0): 0, (K, 1): 0}
        late = write(a, in_hand, claims=mine)
        assert late.next_offsets == {(K, 1): 5} and late.k8s_rows == 5  # partition 1 is still writer-a's
        write(b, prepare(_batch(0, range(5))), claims={(K, 0): b_claim})
        assert _landed(a) == [(p, o, 1) for p in (0, 1) for o in range(5)]
        assert stored_offsets(a) == {(K, 0): 5, (K, 1): 5}
        assert a.execute('SELECT "partition", owner FROM raw.kafka_claims ORDER BY 1').fetchall() == [
            (0, "writer-b"), (1, "writer-a")]
        # Without claims (a bounded drain, files) nothing is checked: the stored offsets still skip what landed.
        again = write(a, prepare(_batch(0, range(7))))
        assert (again.skipped, again.k8s_rows) == (5, 2)
    finally:
        a.close()
        b.close()


class _PausedCommit:
    """A connection whose next COMMIT waits until told: a landing still open while another writer commits."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con, self.at_commit, self.go = con, threading.Event(), threading.Event()
        self.commits = 0

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            self.commits += 1
            if self.commits == 1:
                self.at_commit.set()
                assert self.go.wait(60)
        return self.con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)


def test_a_landing_open_while_the_partition_is_claimed_conflicts_and_then_leaves_it(
        settings: config.Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = lake.connect(settings), lake.connect(settings)
    try:
        a_claim, _ = claim(a, [(K, 0)], {}, "writer-a")
        write(a, prepare(_batch(0, range(3))), claims={(K, 0): a_claim})
        paused = _PausedCommit(a)
        out: dict[str, Any] = {}

        def zombie() -> None:
            try:
                out["stats"] = write(paused, prepare(_batch(0, range(3, 8))),  # type: ignore[arg-type]
                                     claims={(K, 0): a_claim})
            except BaseException as e:  # reported below
                out["error"] = e

        t = threading.Thread(target=zombie)
        t.start()
        assert paused.at_commit.wait(60), "the landing never reached its commit"
        # writer-b is another process: it does not wait for this one's commit lock (writer-a holds it)
        monkeypatch.setattr(lake, "COMMIT_LOCK", type(lake.COMMIT_LOCK)())
        b_claim, stored = claim(b, [(K, 0)], {}, "writer-b")  # committed while writer-a's landing is open
        assert stored == {(K, 0): 3}
        paused.go.set()
        t.join(120)
        assert "error" not in out, out.get("error")
        assert out["stats"].k8s_rows == 0 and out["stats"].next_offsets == {}
        assert paused.commits >= 1
        write(b, prepare(_batch(0, range(3, 8))), claims={(K, 0): b_claim})
        assert _landed(b) == [(0, o, 1) for o in range(8)]
        assert stored_offsets(b) == {(K, 0): 8}
    finally:
        a.close()
        b.close()
