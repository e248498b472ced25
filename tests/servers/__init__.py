"""Real servers the tests start on free loopback ports (PostgreSQL today; others join here)."""
