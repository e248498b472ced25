"""The job chart's layer lane: gang assembly ends at binding (int_gang.assembled_at), start-up (binding to
running) is its own band, and a gang already bound when first seen draws no assembly it cannot time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb

from reports import jobchart

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
END = T0 + timedelta(hours=2)


def _m(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _lake() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("ATTACH ':memory:' AS lake; USE lake; CREATE SCHEMA intermediate")
    con.execute("CREATE TABLE intermediate.int_admission (cluster TEXT, namespace TEXT, job TEXT, "
                "created_at TIMESTAMPTZ, admitted_at TIMESTAMPTZ)")
    con.execute("CREATE TABLE intermediate.int_gang (cluster TEXT, namespace TEXT, job TEXT, "
                "assembly_started_at TIMESTAMPTZ, assembled_at TIMESTAMPTZ, all_running_at TIMESTAMPTZ, "
                "start_up_s DOUBLE, assembled_before_capture BOOLEAN)")
    gangs = [  # job, assembly started, assembled, running, start-up s, before capture
        ("pulls", _m(5), _m(10), _m(25), 900.0, False),
        ("seen-bound", _m(5), _m(6), _m(7), 60.0, True),
        ("short", _m(5), None, None, None, False),
    ]
    for job, *rest in gangs:
        con.execute("INSERT INTO intermediate.int_admission VALUES ('c', 'ns', ?, ?, ?)", [job, _m(0), _m(5)])
        con.execute("INSERT INTO intermediate.int_gang VALUES ('c', 'ns', ?, ?, ?, ?, ?, ?)", [job, *rest])
    return con


def _bands(con: duckdb.DuckDBPyConnection, job: str) -> list[tuple[str, datetime, datetime]]:
    f = {"cluster": "c", "namespace": "ns", "job": job}
    return [(b.label, b.start, b.end) for b in jobchart._lanes(con, f, {}, [], END)]


def test_assembly_ends_at_binding_and_start_up_is_its_own_band() -> None:
    con = _lake()
    # Admitted and assembly start coincide, so the admitted band has no width and is left out.
    assert _bands(con, "pulls") == [("queued", _m(0), _m(5)), ("gang assembling", _m(5), _m(10)),
                                    ("starting up", _m(10), _m(25)), ("running", _m(25), END)]


def test_gang_bound_before_capture_draws_no_assembly() -> None:
    labels = [b[0] for b in _bands(_lake(), "seen-bound")]
    assert "gang assembling" not in labels and "gang incomplete" not in labels
    assert labels[-1] == "running"


def test_gang_not_assembled_is_incomplete_without_start_up() -> None:
    bands = _bands(_lake(), "short")
    assert ("gang incomplete", _m(5), END) in bands
    assert not any(b[0] in ("starting up", "running", "gang assembling") for b in bands)
