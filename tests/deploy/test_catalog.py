"""The PostgreSQL lake catalog: every accepted URL form attaches, and the data path is shared."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

import duckdb
import pytest

from gangscope import config
from pipeline import lake


def _with(settings: config.Settings, **changes: object) -> config.Settings:
    return dataclasses.replace(settings, **changes)


def test_attach_sql_forms(offline_settings: config.Settings) -> None:
    s = offline_settings
    data = f"{s.lake_path.resolve()}/"
    assert lake.attach_sql(_with(s, catalog="postgres://gs:pw@pg:5432/lake")) == (
        f"ATTACH 'ducklake:postgres:postgres://gs:pw@pg:5432/lake' AS lake (DATA_PATH '{data}')")
    assert lake.attach_sql(_with(s, catalog="postgresql://pg/lake"), read_only=True) == (
        f"ATTACH 'ducklake:postgres:postgresql://pg/lake' AS lake (DATA_PATH '{data}', READ_ONLY)")
    # libpq key=value after a postgres: prefix is passed as it is, not prefixed twice.
    assert lake.attach_sql(_with(s, catalog="postgres:dbname=lake host=pg")).startswith(
        "ATTACH 'ducklake:postgres:dbname=lake host=pg' AS lake")
    # A quote in a password cannot break out of the SQL string.
    assert "pw''x" in lake.attach_sql(_with(s, catalog="postgres://gs:pw'x@pg/lake"))
    remote = _with(s, lake_data_path="s3://bucket/gangscope")
    assert "DATA_PATH 's3://bucket/gangscope/'" in lake.attach_sql(remote)
    assert "httpfs" in lake.catalog_extensions(remote) and "httpfs" not in lake.catalog_extensions(s)


@pytest.mark.parametrize("form", ["uri", "keyvalue"])
def test_postgres_catalog_attaches_and_shares(offline_settings: config.Settings, pg_catalog: str, form: str) -> None:
    url = urlsplit(pg_catalog)
    catalog = pg_catalog if form == "uri" else (
        f"postgres:host={url.hostname} port={url.port} user={url.username} password={url.password} "
        f"dbname={url.path.lstrip('/')}")
    writer = _with(offline_settings, catalog=catalog)
    con = lake.connect(writer)
    con.execute("INSERT INTO raw.scrapes (cluster, target, up) VALUES ('c1', 'a', true)")
    if form == "keyvalue":  # the attach itself was the point; the rest is the same for both forms
        assert con.execute("SELECT count(*) FROM raw.scrapes").fetchone() == (1,)
        con.close()
        return
    # A second connection (an analyst, read-only) sees the row while the writer stays attached.
    reader = lake.connect(writer, read_only=True, create=False)
    assert reader.execute("SELECT target FROM raw.scrapes").fetchall() == [("a",)]
    with pytest.raises(duckdb.Error):
        reader.execute("INSERT INTO raw.scrapes (cluster, target) VALUES ('c1', 'b')")
    reader.close()
    con.close()
    # DuckLake pins the first DATA_PATH: a writer naming another one is refused, not silently split.
    elsewhere = _with(writer, lake_data_path=str(offline_settings.data / "other-lake"))
    with pytest.raises(duckdb.Error, match="DATA_PATH"):
        lake.connect(elsewhere)
