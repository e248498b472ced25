"""Fixtures of the reports tests: one marts lake built once per session (tests only read it)."""

from __future__ import annotations

import json
from collections.abc import Callable

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


@pytest.fixture(scope="session")
def sim_lakes(tmp_path_factory: pytest.TempPathFactory, broker) -> Callable[[str], tuple[config.Settings, dict]]:
    """A lake per simulator scenario, built once per session: ``sim_lakes(name) -> (settings, truth)``.

    The real chain as the demo runs it: simulate, replay through the embedded broker and the pipeline, build
    the models. 30 s scrapes (the demo's) keep it quick.
    """
    from collectors.simulate import generate
    from gangscope.app.replay import replay
    from pipeline import models

    built: dict[str, tuple[config.Settings, dict]] = {}

    def get(name: str) -> tuple[config.Settings, dict]:
        if name not in built:
            base = tmp_path_factory.mktemp(f"sim-{name}")
            prefix = f"s{abs(hash(name)) % 10**8}."
            settings = config.load(overrides={
                "data": str(base / "data"),
                "kafka": {"bootstrap_servers": broker.bootstrap, "topic_prefix": prefix, "partitions": 2},
                "pipeline": {"group_id": f"{prefix}pipeline", "flush_seconds": 0.5, "idle_seconds": 3.0},
            }, environ={})
            big = {"mixed": 20, "gang_assembly": 16}.get(name.split("@")[0], 8)  # variants as their scenario
            g = generate(name, base, seed=1, nodes=big, interval=30.0, subdir="scenario")
            stats = replay(settings, [str(g.directory / "k8s.jsonl")], [str(g.directory / "metrics.prom")],
                           progress=None)
            assert stats.landed
            models.build(settings)
            built[name] = (settings, json.loads((g.directory / "truth.json").read_text()))
        return built[name]

    return get
