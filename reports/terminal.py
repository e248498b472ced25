"""Cluster text made safe for a terminal: control characters shown as escapes, never interpreted.

Event messages, names and labels come from the cluster (any pod can write an Event); printed raw, an
ESC sequence could clear the screen, retitle the terminal or hide lines, and bidi overrides could
reorder what is read. Table output (``diagnose``, ``sql``) passes every cell through ``terminal_safe``.
"""

from __future__ import annotations

import re

# C0 and C1 controls (newline and tab included: one cell, one line), DEL, zero-width and bidi controls.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every control character written as ``\\xNN`` / ``\\uNNNN``."""
    return _UNSAFE.sub(_escape, text)
