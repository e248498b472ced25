"""Fixtures shared with the deploy tests: a PostgreSQL catalog database."""

from tests.deploy.conftest import pg_catalog  # noqa: F401
