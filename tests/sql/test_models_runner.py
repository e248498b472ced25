"""The model runner: order from references, errors for cycles and unknown models, incremental rebuilds
that neither lose nor double rows, staleness; and decoding of both Kueue topologyAssignment formats."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from gangscope.errors import UserError
from pipeline import lake, models
from tests.sql.lakefix import Raw, dcgm, workload


def _write(d: Path, layer: str, name: str, sql: str) -> None:
    (d / layer).mkdir(parents=True, exist_ok=True)
    (d / layer / f"{name}.sql").write_text(sql)


def test_order_follows_references(tmp_path: Path) -> None:
    _write(tmp_path, "marts", "m", "SELECT * FROM intermediate.i JOIN staging.s USING (x)")
    _write(tmp_path, "intermediate", "i", "WITH c AS (SELECT * FROM staging.s) SELECT * FROM c")
    _write(tmp_path, "staging", "s", "SELECT 1 AS x FROM raw.k8s_objects")
    names = [m.table for m in models.order(models.discover(tmp_path))]
    assert names.index("staging.s") < names.index("intermediate.i") < names.index("marts.m")


def test_cycle_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path, "staging", "a", "SELECT * FROM staging.b")
    _write(tmp_path, "staging", "b", "SELECT * FROM intermediate.c")
    _write(tmp_path, "intermediate", "c", "SELECT * FROM staging.a")
    with pytest.raises(UserError, match="cycle"):
        models.order(models.discover(tmp_path))


def test_unknown_reference_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path, "marts", "m", "SELECT * FROM intermediate.nope")
    with pytest.raises(UserError, match="intermediate.nope, which is no model"):
        models.order(models.discover(tmp_path))


def test_real_models_have_an_order() -> None:
    plan = [m.table for m in models.order(models.discover())]
    assert plan.index("staging.stg_node_addresses") < plan.index("staging.stg_metric_signals")
    assert plan.index("marts.findings") < plan.index("marts.jobs")


def _bw(raw: Raw, start: float, end: float) -> None:
    t = start
    while t < end:
        for n in ("a1", "a2"):
            dcgm(raw, t, n, 0, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 1000.0)
        t += 0.25


def test_incremental_rebuild_neither_loses_nor_doubles(offline_settings) -> None:
    con = lake.connect(offline_settings)
    try:
        raw = Raw()
        _bw(raw, 0, 30)
        raw.write(con)
        first = models.build(offline_settings, con)
        assert "intermediate.int_node_bandwidth" not in first.incremental
        assert not models.is_stale(offline_settings, con)
        n1 = con.execute("SELECT count(*) FROM intermediate.int_node_bandwidth").fetchone()[0]
        assert n1 == 2 * 120
        _bw(raw, 30, 31)  # one more minute
        raw.write(con)
        assert models.is_stale(offline_settings, con)
        second = models.build(offline_settings, con, only_stale=True)
        assert "intermediate.int_node_bandwidth" in second.incremental
        rows = con.execute("SELECT count(*), count(DISTINCT (node, ts)) "
                           "FROM intermediate.int_node_bandwidth").fetchone()
        assert rows == (2 * 124, 2 * 124)
        assert models.build(offline_settings, con, only_stale=True).models == 0  # nothing new: nothing built
        full = models.build(offline_settings, con, full=True)
        assert full.incremental == []
        assert con.execute("SELECT count(*) FROM intermediate.int_node_bandwidth").fetchone()[0] == 2 * 124
        # One mark per incremental model (and one per view: the definitions it was made under).
        marked = {m.table for m in models.discover().values() if m.materialized in ("incremental", "view")}
        kept = con.execute(f"SELECT model, count(*) FROM {models.WATERMARKS} GROUP BY ALL").fetchall()
        assert {m for m, _ in kept} == marked and {n for _, n in kept} == {1}
        # A marks table of an older shape is dropped: every incremental model is rebuilt from scratch, once.
        con.execute(f"CREATE OR REPLACE TABLE {models.WATERMARKS} (model VARCHAR, high_water TIMESTAMPTZ)")
        _bw(raw, 31, 32)
        raw.write(con)
        assert models.build(offline_settings, con, only_stale=True).incremental == []
        assert "intermediate.int_node_bandwidth" in models.build(offline_settings, con).incremental
        assert con.execute("SELECT count(*), count(DISTINCT (node, ts)) "
                           "FROM intermediate.int_node_bandwidth").fetchone() == (2 * 128, 2 * 128)
    finally:
        con.close()


def test_builds_add_no_catalog_tables(offline_settings) -> None:
    """Model tables are never inlined into the catalog. With DuckLake's default inlining every build put
    each small model table into a catalog table of its own, and every catalog read slowed with their
    number: the live findings build went from 2 s to 15 s in 40 builds (docs/lake.md)."""
    con = lake.connect(offline_settings)
    try:
        raw = Raw()
        _bw(raw, 0, 5)
        raw.write(con)
        models.build(offline_settings, con)

        def inlined_tables() -> int:
            return con.execute(f"SELECT count(*) FROM __ducklake_metadata_{lake.ALIAS}.ducklake_inlined_data_tables"
                               ).fetchone()[0]

        before = inlined_tables()
        for minute in range(5, 8):
            _bw(raw, minute, minute + 1)
            raw.write(con)
            assert models.build(offline_settings, con, only_stale=True).models
        assert inlined_tables() == before
        # Raw landings still inline (what inlining is for): a one-row insert writes no Parquet file.
        files = con.execute("SELECT count(*) FROM ducklake_list_files(?, 'metric_points', schema => 'raw')",
                            [lake.ALIAS]).fetchone()[0]
        _bw(raw, 8, 8.01)
        raw.write(con)
        assert con.execute("SELECT count(*) FROM ducklake_list_files(?, 'metric_points', schema => 'raw')",
                           [lake.ALIAS]).fetchone()[0] == files
    finally:
        con.close()


def test_a_view_is_made_again_only_when_a_definition_changed(offline_settings, tmp_path: Path) -> None:
    """Views are not made at every build (a catalog write each), yet one reads right after any model changed: an
    upstream table's new column reaches a view over ``SELECT *`` (DuckDB binds a view's columns when it is made)."""
    d = tmp_path / "sql"
    _write(d, "staging", "s", "SELECT 1 AS x FROM (SELECT 1)")
    _write(d, "intermediate", "v", "-- materialized: view\nSELECT * FROM staging.s")
    _write(d, "marts", "m", "SELECT * FROM intermediate.v")

    def views_made(con) -> int:
        return con.execute(f"SELECT count(*) FROM __ducklake_metadata_{lake.ALIAS}.ducklake_view").fetchone()[0]

    con = lake.connect(offline_settings)
    try:
        models.build(offline_settings, con, sql_dir=d)
        made = views_made(con)
        for _ in range(3):
            models.build(offline_settings, con, sql_dir=d)
        assert views_made(con) == made  # built three times, the view made once
        assert con.execute("SELECT * FROM marts.m").fetchall() == [(1,)]
        _write(d, "staging", "s", "SELECT 1 AS x, 'two' AS y FROM (SELECT 1)")
        models.build(offline_settings, con, sql_dir=d)
        assert views_made(con) > made
        assert con.execute("SELECT * FROM marts.m").fetchall() == [(1, "two")]
        assert con.execute("SELECT * FROM intermediate.v").fetchall() == [(1, "two")]
        models.build(offline_settings, con, sql_dir=d, full=True)  # --full makes every view again
        assert views_made(con) > made + 1
    finally:
        con.close()


def test_models_with_nothing_new_to_read_are_kept_and_match_a_full_build(offline_settings) -> None:
    """A build after only new samples keeps the Kubernetes models as they are (issue 37: work that follows what
    arrived); one after a new object rebuilds them. Either way the marts are those a full build makes of the lake."""
    from tests.sql.lakefix import cond, node, pod

    def marts(con) -> dict[str, list]:
        return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                for t in ("marts.findings", "marts.jobs", "staging.stg_workloads", "intermediate.int_pod_jobs")}

    def full_build_agrees(con) -> None:
        got = marts(con)
        models.build(offline_settings, con, full=True)
        assert marts(con) == got

    con = lake.connect(offline_settings)
    try:
        raw = Raw()
        raw.event(0, node("a1", "r1"))
        raw.event(1, workload("team-a", "wl-a", "Job", "job-a", 1, [
            cond("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set main: insufficient quota "
                 "for nvidia.com/gpu in flavor gpu, 16 more needed", 1)]))
        _bw(raw, 0, 20)
        raw.write(con)
        models.build(offline_settings, con)
        _bw(raw, 20, 21)  # samples only
        raw.write(con)
        quiet = models.build(offline_settings, con, only_stale=True)
        assert {"staging.stg_workloads", "staging.stg_pods", "intermediate.int_pod_jobs"} <= set(quiet.kept)
        assert "intermediate.int_node_bandwidth" not in quiet.kept and "marts.findings" not in quiet.kept
        full_build_agrees(con)
        # A new object: the models that read it are built again, and it shows.
        raw.event(21, workload("team-b", "wl-b", "Job", "job-b", 1, [
            cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue team", 21),
            cond("Admitted", "True", "Admitted", "The workload is admitted", 21)], cluster_queue="team"))
        raw.event(21, pod("team-b", "job-b-0", "Job", "job-b", "a1", "Running"))
        _bw(raw, 21, 22)
        raw.write(con)
        busy = models.build(offline_settings, con, only_stale=True)
        assert not {"staging.stg_workloads", "staging.stg_pods", "intermediate.int_pod_jobs"} & set(busy.kept)
        assert ("team-b", "job-b") in {(r[1], r[2]) for r in con.execute(
            "SELECT cluster, namespace, job FROM marts.jobs").fetchall()}
        full_build_agrees(con)
        # Kept across builds that record nothing (the scheduled findings-first builds) too.
        _bw(raw, 22, 23)
        raw.write(con)
        scheduled = models.build(offline_settings, con, only_stale=True, first=("marts.findings",), rest=False)
        assert "staging.stg_workloads" in scheduled.kept
        models.build(offline_settings, con, only_stale=True)
        full_build_agrees(con)
    finally:
        con.close()


def test_bad_model_names_the_file(offline_settings, tmp_path: Path) -> None:
    d = tmp_path / "sql"
    shutil.copytree(models.SQL_DIR, d)
    _write(d, "marts", "broken", "SELECT no_such_column FROM marts.findings")
    with pytest.raises(UserError, match=r"marts.broken .*broken.sql"):
        models.build(offline_settings, sql_dir=d)


def _assignments(reference: Path, version: str) -> list[dict]:
    return [doc["topologyAssignment"] for doc in yaml.safe_load_all(
        (reference / "kueue" / f"workload-topologyassignment-examples.{version}.yaml").read_text())]


def test_both_topology_assignment_formats_decode_to_the_same_rows(offline_settings, reference: Path) -> None:
    raw = Raw()
    v1, v2 = _assignments(reference, "v1beta1"), _assignments(reference, "v1beta2")
    raw.event(0, workload("ns", "old", "Job", "old", 6, [], cluster_queue="cq", assignment=v1[0],
                          api_version="kueue.x-k8s.io/v1beta1"))
    raw.event(0, workload("ns", "new", "Job", "new", 6, [], cluster_queue="cq", assignment=v2[0]))
    raw.event(0, workload("ns", "many", "Job", "many", 12, [], cluster_queue="cq", assignment=v2[1]))
    con = lake.connect(offline_settings)
    try:
        raw.write(con)
        models.build(offline_settings, con)
        q = ("SELECT domain_index, levels, \"values\", pod_count FROM staging.stg_topology_assignments "
             "WHERE workload = ? ORDER BY domain_index")
        old, new = con.execute(q, ["old"]).fetchall(), con.execute(q, ["new"]).fetchall()
        assert old == new == [
            (0, ["cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"], ["block-1", "rack-1"], 4),
            (1, ["cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"], ["block-1", "rack-2"], 2)]
        many = con.execute(q, ["many"]).fetchall()
        assert [r[2][0] for r in many] == [f"pool-1-node-{i}" for i in range(1, 6)] + [
            f"pool-2-node-{i}" for i in range(1, 8)]
        assert {r[3] for r in many} == {1} and [r[0] for r in many] == list(range(12))
    finally:
        con.close()


def test_changed_threshold_makes_models_stale(offline_settings) -> None:
    con = lake.connect(offline_settings)
    try:
        models.build(offline_settings, con)
        assert not models.is_stale(offline_settings, con)
        offline_settings.thresholds.admission_wait_s = 60.0
        assert models.is_stale(offline_settings, con)
        models.build(offline_settings, con, only_stale=True)
        assert not models.is_stale(offline_settings, con)
    finally:
        con.close()


def test_a_list_variable_is_set_again_only_when_it_changed(offline_settings) -> None:
    """The signal map is set once per connection (its conversion is slow), yet an edited map reaches the models."""
    con = lake.connect(offline_settings)
    try:
        first = [{"metric": "A", "signal": "x"}, {"metric": "B", "signal": None}]
        models.set_variables(con, {"m": first, "n": 1})
        assert con.execute("SELECT getvariable('m')").fetchone()[0] == first
        models.set_variables(con, {"m": first, "n": 2})  # kept; the scalar is set every time
        assert con.execute("SELECT getvariable('m'), getvariable('n')").fetchone() == (first, 2)
        edited = [{"metric": "A", "signal": "y"}, {"metric": "B", "signal": None}]
        models.set_variables(con, {"m": edited})
        assert con.execute("SELECT getvariable('m')").fetchone()[0] == edited
        other = lake.connect(offline_settings)  # another connection holds nothing yet
        try:
            models.set_variables(other, {"m": edited})
            assert other.execute("SELECT getvariable('m')").fetchone()[0] == edited
        finally:
            other.close()
    finally:
        con.close()


def test_findings_first_then_the_rest(offline_settings) -> None:
    """`gangscope run` publishes once the findings are committed, before the marts nobody waits for; the
    build is done (not stale) only when the rest committed too, and data landed in between is built next."""
    con = lake.connect(offline_settings)
    try:
        raw = Raw()
        _bw(raw, 0, 30)
        raw.write(con)
        seen: list[tuple[bool, bool, bool]] = []

        def then(_: object) -> None:
            existing = models._existing(con)
            seen.append(("marts.findings" in existing, "marts.node_health" in existing,
                         models.is_stale(offline_settings, con)))
            _bw(raw, 30, 31)  # lands while the rest builds
            raw.write(con)

        stats = models.build(offline_settings, con, only_stale=True, first=("marts.findings", "marts.jobs"),
                             then=then)
        assert seen == [(True, False, True)]  # findings committed, node_health not yet, the build not done
        assert "marts.node_health" in models._existing(con) and stats.models == len(models.discover())
        assert models.is_stale(offline_settings, con)  # the minute landed in between is not built yet
        again = models.build(offline_settings, con, only_stale=True, first=("marts.findings",), then=lambda _: None)
        assert "intermediate.int_node_bandwidth" in again.incremental
        assert not models.is_stale(offline_settings, con)
        assert con.execute("SELECT count(*), count(DISTINCT (node, ts)) FROM intermediate.int_node_bandwidth"
                           ).fetchone() == (2 * 124, 2 * 124)
    finally:
        con.close()
