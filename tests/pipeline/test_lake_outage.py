"""Which lake errors a writer waits out (the catalog or object store away) and which it reports at once (a refusal,
a bug). The messages are the ones DuckDB gave in tests/deploy/test_object_storage_faults.py with PostgreSQL restarted
and SeaweedFS stopped under landing writers; a writer that took one of the first kind for a bug crashed there."""

from __future__ import annotations

import duckdb
import pytest

from pipeline import lake

MET_IN_OUTAGES = [
    (duckdb.InvalidInputException, "Invalid Input Error: Attempting to fetch from an unsuccessful query result\n"
                                   "Error: TransactionContext Error: Current transaction is aborted (please ROLLBACK)"),
    (duckdb.IOException, "IO Error: Failed to query most recent snapshot for DuckLake: Unable to connect to "
                         'Postgres at "postgres://postgres:***@127.0.0.1:52797/lake": connection to server at '
                         '"127.0.0.1", port 52797 failed: Connection refused'),
    (duckdb.InvalidInputException, "Invalid Input Error: Attempting to fetch from an unsuccessful query result\n"
                                   "Error: FATAL:  terminating connection due to administrator command"),
    (duckdb.BinderException, "Binder Error: Failed to get data file list from DuckLake: server closed the connection "
                             "unexpectedly"),
    (duckdb.TransactionException, 'TransactionContext Error: Failed to commit: Failed to execute query "ROLLBACK": '),
]

REFUSALS_AND_BUGS = [
    (duckdb.IOException, "HTTP Error: HTTP PUT error on 'http://127.0.0.1:8333/b/lake/x.parquet' (HTTP 403)"),
    (duckdb.IOException, 'IO Error: Unable to connect to Postgres at "postgres://gs:***@db/lake": FATAL:  password '
                         'authentication failed for user "gs"'),
    (duckdb.CatalogException, "Catalog Error: Table with name k8s_objects does not exist!"),
    (duckdb.BinderException, 'Binder Error: Referenced column "uidd" not found in FROM clause!'),
    (duckdb.ConversionException, "Conversion Error: Could not convert string 'x' to INT64"),
]


@pytest.mark.parametrize(("cls", "text"), MET_IN_OUTAGES)
def test_an_outage_is_waited_out(cls: type[duckdb.Error], text: str) -> None:
    assert lake.is_unavailable(cls(text))


@pytest.mark.parametrize(("cls", "text"), REFUSALS_AND_BUGS)
def test_a_refusal_or_a_bug_is_reported_at_once(cls: type[duckdb.Error], text: str) -> None:
    assert not lake.is_unavailable(cls(text))


def test_outlast_runs_a_landing_again_after_the_catalog_aborted_its_transaction(monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    monkeypatch.setattr(lake.time, "sleep", lambda s: None)
    calls: list[int] = []

    def landing() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise duckdb.InvalidInputException(MET_IN_OUTAGES[0][1])
        return "landed"

    assert lake.outlast(landing, "landing") == "landed"
    assert len(calls) == 3
    with pytest.raises(duckdb.CatalogException):
        lake.outlast(lambda: (_ for _ in ()).throw(duckdb.CatalogException(REFUSALS_AND_BUGS[2][1])), "landing")


def test_a_commit_past_ducklake_s_own_retries_is_a_conflict_run_again() -> None:
    """A model build beside two writers landing every half second lost the race for the next snapshot id more times
    than DuckLake retries (tests/deploy/test_object_storage.py, loaded machine); as a conflict it is run again,
    where it failed the build and /healthz said unhealthy."""
    e = duckdb.TransactionException(
        "TransactionContext Error: Failed to commit: Failed to commit DuckLake transaction.\nExceeded the maximum "
        "retry count of 10 set by the ducklake_max_retry_count setting.\n. Consider increasing the value with: e.g., "
        '"SET ducklake_max_retry_count = 100;"\nFailed to flush changes into DuckLake: Failed to execute query '
        '"INSERT INTO "public".ducklake_snapshot VALUES (115, NOW(), 13, 65, 409)": ERROR:  duplicate key value '
        'violates unique constraint "ducklake_snapshot_pkey"')
    assert lake.is_conflict(e)
    calls = []

    def build() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise e
        return "built"

    assert lake.retry(build, base_s=0.001) == "built" and len(calls) == 3


def test_an_internal_error_opens_the_lake_again_a_few_times_then_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB invalidates its instance after an internal error: with ``reopen`` the step runs again on a new one
    (a catalog still away meanwhile is waited out), but an error that repeats is reported after ``REOPENS`` tries;
    without ``reopen`` (nothing could replace the connection) it is reported at once."""
    monkeypatch.setattr(lake.time, "sleep", lambda s: None)
    internal = duckdb.InternalException("INTERNAL Error: Attempted to access index 0 within vector of size 0")
    invalidated = duckdb.FatalException("FATAL Error: Failed: database has been invalidated because of a previous "
                                        "fatal error. The database must be restarted prior to being used again.")
    assert lake.is_broken(internal) and lake.is_broken(invalidated)
    assert not any(lake.is_broken(cls(text)) for cls, text in MET_IN_OUTAGES + REFUSALS_AND_BUGS)

    opened: list[int] = []
    outcomes: list[BaseException | str] = [internal, duckdb.IOException(MET_IN_OUTAGES[1][1]), invalidated, "landed"]

    def reopen() -> None:
        opened.append(1)
        if len(opened) == 1:  # the catalog is still away when the first new instance attaches it
            raise duckdb.IOException(MET_IN_OUTAGES[1][1])

    def step() -> str:
        out = outcomes.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out

    assert lake.outlast(step, "landing", reopen=reopen) == "landed"
    assert len(opened) == 3 and not outcomes  # the failed attach was tried again; an outage needs no new instance

    def always() -> str:
        raise internal

    opened.clear()
    with pytest.raises(duckdb.InternalException):
        lake.outlast(always, "landing", reopen=lambda: opened.append(1))
    assert len(opened) == lake.REOPENS
    with pytest.raises(duckdb.InternalException):
        lake.outlast(always, "landing")
