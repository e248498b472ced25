"""Fixtures of the reports tests: one marts lake built once per session (tests only read it)."""

from __future__ import annotations

import pytest

from gangscope import config
from pipeline import lake
from tests.reports import lakefix


@pytest.fixture(scope="session")
def report_lake(tmp_path_factory: pytest.TempPathFactory) -> config.Settings:
    """Settings of a lake holding lakefix's marts: a Kueue+coscheduling window and a native one."""
    settings = config.load(overrides={"data": str(tmp_path_factory.mktemp("report-lake") / "data")}, environ={})
    con = lake.connect(settings)
    lakefix.build(con)
    con.close()
    return settings
