"""Secrets never leave: a canary secret in every credential slot, the chain run end to end (scrape with basic
auth and a bearer token, Kafka with SASL settings, a PostgreSQL catalog with a password, a webhook with
user:password@), then every log line, lake table, report, error and /metrics is searched for it."""

from __future__ import annotations

import asyncio
import base64
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from prometheus_client import generate_latest

from gangscope import config, telemetry
from gangscope.app.cli import main
from tests.servers.postgres import PASSWORD as PG_PASSWORD

CANARY = "c4n4ry-S3cret-0xF00D"
EXPOSITION = "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\",Hostname=\"n1\"} 87\n"


class _Server:
    """Answers GET /basic (basic auth u:CANARY), GET /bearer (Bearer CANARY), POST /hook (basic hook:CANARY)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, want: str) -> None:
                auth = self.headers.get("Authorization")
                outer.seen.append((self.command, self.path, auth))
                ok = auth == want
                body = EXPOSITION.encode() if ok and self.command == "GET" else b"{}"
                self.send_response(200 if ok else 401)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                basic = "Basic " + base64.b64encode(f"u:{CANARY}".encode()).decode()
                self._answer(basic if self.path.startswith("/basic") else f"Bearer {CANARY}")

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._answer("Basic " + base64.b64encode(f"hook:{CANARY}".encode()).decode())

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def test_canary_secret_reaches_no_log_table_report_error_or_metric(tmp_path, broker, pg_catalog, server, capsys):
    token = tmp_path / "token"
    token.write_text(CANARY + "\n")
    cfg = tmp_path / "gangscope.yaml"
    base = f"127.0.0.1:{server.port}"
    cfg.write_text(yaml.safe_dump({
        "data": str(tmp_path / "data"),
        "catalog": pg_catalog,  # postgres://postgres:<PG_PASSWORD>@...
        "kafka": {"bootstrap_servers": broker.bootstrap, "topic_prefix": "canary.", "partitions": 1,
                  "security": {"sasl_plain_username": "u", "sasl_plain_password": CANARY}},
        "pipeline": {"group_id": "canary", "flush_seconds": 0.5, "idle_seconds": 3.0},
        "metrics": {"targets": [
            {"url": f"http://u:{CANARY}@{base}/basic", "job": "dcgm"},
            {"url": f"http://{base}/bearer?token={CANARY}", "job": "node", "bearer_token_file": str(token)},
            {"url": f"http://u:{CANARY}@127.0.0.1:1/down?access_key={CANARY}", "job": "down"},
        ]},
        "schedule": {"webhook_url": f"http://hook:{CANARY}@{base}/hook"},
        "log": {"level": "DEBUG"},
    }))
    settings = config.load(str(cfg), environ={})

    # Scrape (basic auth from the URL's userinfo, a bearer token, an unreachable target) and publish.
    from collectors.metrics.scrape import Scraper
    from collectors.metrics.targets import static_targets
    from gangscope import logs
    from gangscope.transport.publish import Publisher

    logs.setup("DEBUG")
    publisher = Publisher(settings, broker.bootstrap)

    async def scrape() -> list:
        async with Scraper(settings.cluster, publisher.publish) as s:
            return await s.scrape_round(static_targets(settings))

    batches = asyncio.run(scrape())
    assert [b.up for b in batches] == [True, True, False]  # the credentials worked
    assert publisher.flush(30)
    publisher.close()
    args = ["--config", str(cfg)]
    assert main(["pipeline", "--once", *args]) == 0
    assert main(["diagnose", "--all", *args]) == 0
    for fmt in ("html", "md"):
        assert main(["report", "--format", fmt, "--out", str(tmp_path / f"r.{fmt}"), *args]) == 0
    from gangscope.app.schedule import write_reports

    reports = write_reports(settings, "hourly")
    assert ("POST", "/hook", "Basic " + base64.b64encode(f"hook:{CANARY}".encode()).decode()) in server.seen
    # Errors that quote a credential-bearing setting: a catalog that refuses, a webhook that fails.
    bad = pg_catalog.rsplit("/", 1)[0].replace(f":{PG_PASSWORD}@", f":{CANARY}@") + "/nope"
    assert main(["sql", "SELECT 1", *args, "--catalog", bad]) != 0
    from gangscope.app.schedule import post_webhook

    with pytest.raises(RuntimeError) as failed:
        post_webhook(f"http://hook:{CANARY}@127.0.0.1:1/hook", {})
    out, err = capsys.readouterr()
    assert "gangscope: " in err and err.strip()  # the errors were printed ...

    texts = {"stdout": out, "stderr and logs": err, "webhook error": str(failed.value),
             "/metrics": generate_latest(telemetry.REGISTRY).decode()}
    texts.update({str(p): p.read_text() for p in [tmp_path / "r.html", tmp_path / "r.md", *reports]})
    from pipeline import lake

    con = lake.connect(settings, read_only=True)
    try:
        tables = con.execute("SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = 'lake'") \
            .fetchall()
        for schema, table in tables:
            texts[f"{schema}.{table}"] = repr(con.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall())
        targets = [r[0] for r in con.execute("SELECT DISTINCT target FROM raw.scrapes ORDER BY 1").fetchall()]
    finally:
        con.close()
    assert len(tables) > 20 and f"http://u:***@{base}/basic" in targets  # ... and the lake holds the scrapes
    for where, text in texts.items():
        for secret in (CANARY, PG_PASSWORD, base64.b64encode(f"u:{CANARY}".encode()).decode()):
            assert secret not in text, f"{secret} leaked into {where}"


def test_conflicting_auth_on_a_target_is_one_line_at_start(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("t\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"metrics": {"targets": [
        {"url": f"http://u:{CANARY}@127.0.0.1:9400/metrics", "job": "dcgm", "bearer_token_file": str(token)}]}}))
    assert main(["collect", "metrics", "--config", str(cfg), "--bootstrap-servers", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "choose one" in err and CANARY not in err, err
