"""Reports, baseline and the docs' queries on the real chain: simulator -> Kafka -> lake -> models, with known truth."""

from __future__ import annotations

import html
import json
import re
import statistics
from pathlib import Path

import pytest

from gangscope import config
from reports import baseline, sqlshell, tabledocs
from reports.report import write_report

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def chain(broker, tmp_path_factory):
    """The `mixed` scenario (1 h, 20 nodes, 60 s scrapes) replayed through the embedded broker and modelled."""
    pytest.importorskip("collectors.simulate.cli")
    from gangscope.app.replay import replay
    from pipeline import models

    base = tmp_path_factory.mktemp("chain")
    settings = config.load(overrides={
        "data": str(base / "data"),
        "kafka": {"bootstrap_servers": broker.bootstrap, "topic_prefix": f"chain{id(base) % 10**6}.",
                  "partitions": 4},
        "pipeline": {"group_id": f"chain{id(base) % 10**6}", "flush_seconds": 0.5, "idle_seconds": 3.0},
    }, environ={})
    from gangscope.app.cli import main

    assert main(["simulate", "--scenario", "mixed", "--interval", "60", "--out", str(base / "sim")]) == 0
    sim = base / "sim" / "mixed"
    replay(settings, [str(sim / "k8s.jsonl")], [str(sim / "metrics.prom")], land=True, progress=None)
    models.build(settings)
    truth = json.loads((sim / "truth.json").read_text())
    return settings, truth


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_report_names_every_injected_fault(chain, tmp_path):
    settings, truth = chain
    text = write_report(settings, "html", tmp_path / "r.html").read_text()
    md = write_report(settings, "md", tmp_path / "r.md").read_text()
    faults = [j for j in truth["jobs"] if j["root_cause"] != "healthy"]
    assert faults
    for j in faults:
        name = html.escape(f"{j['namespace']}/{j['job']}")
        # The job is listed with its true class in the "need action" table (same row).
        row = next((r for r in text.split("<tr>") if name in r and j["root_cause"] in r), None)
        assert row is not None, f"{name} {j['root_cause']} missing from the report"
        assert j["job"].replace("_", "\\_") in md or j["job"] in md
    # Healthy jobs are not flagged.
    flagged = text[text.index("Jobs that need action"):text.index("Findings by class")]
    for j in truth["jobs"]:
        if j["root_cause"] == "healthy" and not any(f["job"] == j["job"] for f in faults):
            assert f"{j['namespace']}/{j['job']}<" not in flagged


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_baseline_on_the_chain_matches_the_models(chain, tmp_path):
    settings, truth = chain
    snap = baseline.snapshot(settings, tmp_path / "b.json")
    con = sqlshell.connect_read_only(settings)
    try:
        waits = [r[0] for r in con.execute("SELECT wait_s FROM intermediate.int_admission "
                                           "WHERE wait_s IS NOT NULL").fetchall()]
        classes = dict(con.execute("SELECT root_cause, count(*) FROM marts.findings WHERE root_cause <> 'healthy' "
                                   "GROUP BY ALL").fetchall())
        idle = con.execute("SELECT coalesce(sum(idle_gpu_hours), 0) FROM marts.idle_gpu_hours").fetchone()[0]
    finally:
        con.close()
    o = snap["overall"]
    assert o["jobs"] == len({(j["namespace"], j["job"]) for j in truth["jobs"]})
    assert o["admission_wait_p50_s"] == pytest.approx(statistics.median(waits))
    assert o["admission_wait_p95_s"] == pytest.approx(statistics.quantiles(waits, n=100, method="inclusive")[94])
    assert o["findings_by_class"] == classes and o["idle_gpu_hours"] == pytest.approx(idle)
    assert set(truth_classes := {j["root_cause"] for j in truth["jobs"]} - {"healthy"}) <= set(classes), truth_classes
    assert "kueue" in snap["systems"]["queue"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_docs_sql_examples_run(chain):
    settings, _ = chain
    queries = re.findall(r"```sql\n(.*?)```", (ROOT / "docs" / "sql.md").read_text(), re.S)
    assert len(queries) == 5
    con = sqlshell.connect_read_only(settings)
    try:
        for q in queries:
            cols, rows = sqlshell.run_query(con, q)
            assert cols and rows, q  # the mixed scenario has an answer to every question
    finally:
        con.close()


def test_tables_doc_is_up_to_date():
    assert (ROOT / "docs" / "tables.md").read_text() == tabledocs.render(), \
        "docs/tables.md is stale: run `python -m reports.tabledocs`"
    text = tabledocs.render()
    for table in ("marts.findings", "marts.jobs", "staging.stg_metric_signals", "raw.k8s_objects"):
        assert f"### `{table}`" in text
    assert "| `root_cause` |" in text
