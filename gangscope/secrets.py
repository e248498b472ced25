"""Credentials never leave: one redaction for logs, errors, lake rows, reports and /metrics.

Generic on purpose, so new credential settings (Kafka SASL/TLS, webhooks, catalogs) are covered
without a list per feature: a URL's ``user:password@`` keeps the user and loses the password, a query
parameter or ``key=value`` / ``"key": "value"`` pair whose key names a credential loses its value, and
so does ``Bearer <token>`` / ``Basic <token>``.
"""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlencode, urlsplit, urlunsplit

MASK = "***"
# Key names (config keys, query parameters, JSON fields, key=value pairs) whose value is a credential.
_KEY = r"(?:[a-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|" \
       r"credential|authorization|auth|sasl_plain_password|signature|sig))"
_SECRET_KEY = re.compile(rf"(?i)^{_KEY}$")
_PAIR = re.compile(rf"(?i)(\b{_KEY}[\"']?\s*[:=]\s*[\"']?)([^\s\"',}}&]+)")
_URL_USERINFO = re.compile(r"(?i)([a-z][a-z0-9+.-]*://[^:/@\s]*:)([^@\s/]+)(@)")
_SCHEME_TOKEN = re.compile(r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=-]+)")


def is_secret_key(key: str) -> bool:
    """Whether a setting / parameter named ``key`` holds a credential (``sasl_plain_password``, ``token``...)."""
    return bool(_SECRET_KEY.match(key))


def redact(text: str) -> str:
    """``text`` with every credential-looking value replaced by ``***``."""
    text = _URL_USERINFO.sub(rf"\g<1>{MASK}\g<3>", text)
    text = _SCHEME_TOKEN.sub(rf"\g<1>\g<2>{MASK}", text)
    return _PAIR.sub(rf"\g<1>{MASK}", text)


def redact_url(url: str) -> str:
    """A URL fit to show and store: no password in the userinfo, no credential in the query."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}:{MASK}@{host}" if ":" in user else netloc
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(is_secret_key(k) for k, _ in pairs):
            query = urlencode([(k, MASK if is_secret_key(k) else v) for k, v in pairs], safe="*")
    return urlunsplit(SplitResult(parts.scheme, netloc, parts.path, query, parts.fragment))


def split_userinfo(url: str) -> tuple[str, str | None]:
    """(URL without ``user:password@``, ``Basic ...`` Authorization header value or None)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    token = base64.b64encode(f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()).decode()
    return urlunsplit(parts._replace(netloc=host)), f"Basic {token}"


def redact_mapping(values: dict[str, Any]) -> dict[str, Any]:
    """A settings mapping fit to show: credential keys masked, URLs and text redacted, recursively."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if is_secret_key(str(k)) and v not in (None, ""):
            out[k] = MASK
        elif isinstance(v, dict):
            out[k] = redact_mapping(v)
        elif isinstance(v, str):
            out[k] = redact(v)
        else:
            out[k] = v
    return out
