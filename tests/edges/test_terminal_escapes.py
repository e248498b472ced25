"""Terminal control characters from cluster data are shown escaped by `diagnose` and `sql`, never interpreted."""

from __future__ import annotations

from reports import diagnose, sqlshell
from reports.terminal import terminal_safe

HOSTILE = "pulled \x1b[2J\x1b]0;owned\x07 image\r\nnext\u202edeliver\x00\x9b31m"


def _clean(text: str) -> bool:
    return not any(ord(c) < 0x20 and c != "\n" or 0x7f <= ord(c) <= 0x9f or c in "\u202e\x00" for c in text)


def test_terminal_safe_escapes_every_control_and_keeps_text():
    out = terminal_safe(HOSTILE)
    assert out == "pulled \\x1b[2J\\x1b]0;owned\\x07 image\\x0d\\x0anext\\u202edeliver\\x00\\x9b31m"
    assert terminal_safe("GPU 3 on gpu-node-7: XID 79 — ünïcode ok") == "GPU 3 on gpu-node-7: XID 79 — ünïcode ok"


def test_diagnose_table_escapes_cluster_text():
    row = {"namespace": "ml\x1b[31m", "job": "j", "root_cause": "gang_assembly", "severity": "critical",
           "started_at": "2026-11-01T00:00:00Z", "nodes": ["n\x1b[1m1"], "summary": HOSTILE}
    table = diagnose.to_table([row])
    assert _clean(table) and "\\x1b[2J" in table and "ml\\x1b[31m/j" in table and table.count("\n") == 1


def test_sql_table_escapes_values_and_column_names():
    table = sqlshell.format_table(["msg\x1b[0m"], [(HOSTILE,), ("plain",)], max_width=200)
    assert _clean(table) and "msg\\x1b[0m" in table and "\\x1b]0;owned\\x07" in table
    assert len(table.splitlines()) == 5  # header, rule, two rows, count: nothing broke a line
