"""The live page's fleet section on a lake the real chain built (the simulator's ``mixed`` scenario, replayed and
modelled): GPU-hours lost by cause over the last 24 h of data, nodes ranked by trouble, ClusterQueues ranked by
wait, each as the marts hold them. tests/reports/test_page.py's lake has no ``marts.gpu_hours_lost`` (its page says
"model not built yet"), and the end-to-end test does not look at this section."""

from __future__ import annotations

import re
import time
import urllib.request
from datetime import timedelta

import pytest

from gangscope import telemetry
from gangscope.app.page import LivePage
from pipeline import lake
from reports import page_data
from reports.charts import esc
from reports.lakeread import forget


@pytest.mark.timeout(600)
def test_the_fleet_section_lists_lost_gpu_hours_nodes_and_queues_from_the_marts(sim_lakes) -> None:
    settings, truth = sim_lakes("mixed")
    con = lake.connect(settings, read_only=True)
    try:
        end = page_data.as_of(con, settings.cluster)
        assert end is not None
        lost = con.execute(
            "SELECT root_cause, sum(gpu_hours) FROM marts.gpu_hours_lost WHERE started_at >= ? "
            "GROUP BY ALL ORDER BY 2 DESC, 1",
            [end - timedelta(hours=page_data.FLEET_HOURS)],
        ).fetchall()
        nodes = [
            r[0]
            for r in con.execute(
                "SELECT node FROM marts.node_health WHERE coalesce(trouble_score, 0) > 0 ORDER BY trouble_score DESC, "
                "node LIMIT 10"
            ).fetchall()
        ]
        queues = [
            r[0]
            for r in con.execute(
                "SELECT cluster_queue FROM marts.queue_health WHERE cluster_queue IS NOT NULL "
                "ORDER BY wait_p95_s DESC NULLS LAST, cluster_queue LIMIT 10"
            ).fetchall()
        ]
    finally:
        forget(con)
        con.close()
    # The scenario's faults cost GPU-hours, one of its nodes is in trouble, its jobs wait in ClusterQueues.
    assert lost and {c for c, _ in lost} <= {j["root_cause"] for j in truth["jobs"]} and nodes and queues

    server = telemetry.start_http_server("127.0.0.1:0")
    page = LivePage(settings, 60.0).start().mount(server)
    try:
        deadline = time.monotonic() + 120
        while page._overview is None or page._fleet is None:
            assert time.monotonic() < deadline, "the page's first read took over 120 s"
            time.sleep(0.1)
        with urllib.request.urlopen(server.url + "/", timeout=60) as r:
            text = r.read().decode()
    finally:
        page.close()
        server()
    fleet = text[text.index('<section id="fleet">') :]
    fleet = fleet[: fleet.index("</section>")]
    assert f"<h2>GPU-hours lost (last {page_data.FLEET_HOURS} h)</h2>" in fleet
    assert f"<b>{sum(h for _, h in lost):,.1f} GPU-hours</b> lost" in fleet
    assert "GPU-hours lost by root cause" in fleet and "<svg" in fleet  # the chart, inline
    # The table: every cause with its hours, most first.
    causes = re.findall(r"<td[^>]*>([a-z_]+) \(", fleet[: fleet.index("Nodes ranked by faults")])
    assert causes == [c for c, _ in lost]
    for cause, hours in lost:
        assert re.search(rf">{re.escape(cause)} \([^<]*\)</td><td[^>]*>{hours:,.1f}</td>", fleet), cause
    ranked = fleet[fleet.index("Nodes ranked by faults") : fleet.index("ClusterQueues ranked by wait")]
    assert [n for n in re.findall(r"<td[^>]*>([^<]+)</td>", ranked) if n in nodes] == nodes
    by_wait = fleet[fleet.index("ClusterQueues ranked by wait") :]
    assert [q for q in re.findall(r"<td[^>]*>([^<]+)</td>", by_wait) if q in map(esc, queues)] == [
        esc(q) for q in queues
    ]


def test_the_fleet_section_escapes_what_the_cluster_names() -> None:
    """Node and ClusterQueue names, and what a node's faults say, come from the cluster: text on the page, never
    markup (the lake of tests/reports/test_page.py has no fleet marts to show it there)."""
    from reports.fleet import Fleet
    from reports.report_html import fleet_section

    evil = '<img src=x onerror="alert(1)">&amp;'
    fl = Fleet(lost=[("gpu_fault", evil, 2.5)], nodes=[(evil, evil, 3.0)], built=True,
               queues=[{"cluster_queue": evil, "pending": 2, "wait_p95_s": 600.0, "wait_max_s": 900.0,
                        "blocked_quota": 1, "blocked_topology": 0}])
    html = "".join(fleet_section(fl, "<p>intro</p>"))
    assert "<img" not in html and 'onerror="' not in html
    assert html.count(esc(evil)) >= 4  # the cause's how, the node, its faults, the ClusterQueue
