"""Imports flow the way the data does (docs/architecture.md): a forbidden import fails here.

Every import is checked, including those inside functions and ``importlib.import_module("...")``
calls with a literal name, since the CLI and the service load stages lazily.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = ("gangscope", "collectors", "pipeline", "reports", "sql")

# layer of a module -> layers it may import (its own included). Data flows collect -> transport -> land -> report.
ALLOWED = {
    "foundation": {"foundation"},
    "transport": {"foundation", "transport"},
    "collectors": {"foundation", "transport", "collectors"},
    "pipeline": {"foundation", "transport", "pipeline"},
    "reports": {"foundation", "pipeline", "reports"},
    "app": {"foundation", "transport", "collectors", "pipeline", "reports", "app"},
}


def layer(module: str) -> str | None:
    """The layer a dotted module name belongs to; None for third-party and standard library."""
    parts = module.split(".")
    if parts[0] == "gangscope":
        if len(parts) > 1 and parts[1] in ("transport", "app"):
            return parts[1]
        return "foundation"
    if parts[0] in ("collectors", "pipeline", "reports"):
        return parts[0]
    if parts[0] == "sql":
        return "sql"
    return None


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every first-party import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            # ``from gangscope import app`` imports the module gangscope.app
            found += [(node.lineno, f"{mod}.{a.name}") for a in node.names if layer(f"{mod}.{a.name}") != layer(mod)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return [(line, m) for line, m in found if m.split(".")[0] in FIRST_PARTY]


def violations(root: Path = ROOT) -> list[str]:
    out = []
    for top in ("gangscope", "collectors", "pipeline", "reports", "sql"):
        for path in sorted((root / top).rglob("*.py")):
            own = layer(module_name(path, root))
            for line, mod in imports(path, root):
                target = layer(mod)
                if own is None or target is None or target in ALLOWED.get(own, set()):
                    continue
                out.append(f"{path.relative_to(root)}:{line}: {own} imports {mod} ({target})")
    return out


def test_no_stage_imports_a_later_stage_and_the_foundation_imports_no_stage() -> None:
    assert violations() == []


def test_sql_folder_is_plain_sql() -> None:
    assert not [p for p in (ROOT / "sql").rglob("*") if p.is_file() and p.suffix not in (".sql", ".md")
                and p.name != "__init__.py"]


@pytest.mark.parametrize(("where", "source", "expected"), [
    ("collectors/k8s/x.py", "from pipeline import lake\n", "collectors imports pipeline (pipeline)"),
    ("collectors/x.py", "def f():\n    from reports.diagnose import findings\n", "collectors imports reports.diagnose"),
    ("pipeline/x.py", "import importlib\nimportlib.import_module('reports.report')\n",
     "pipeline imports reports.report"),
    ("gangscope/x.py", "from gangscope.app import cli\n", "foundation imports gangscope.app"),
    ("gangscope/transport/x.py", "from pipeline.lake import connect\n", "transport imports pipeline.lake"),
    ("gangscope/y.py", "from gangscope import app\n", "foundation imports gangscope.app"),
    ("pipeline/y.py", "from . import lake\nfrom ..collectors import replay\n", "pipeline imports collectors"),
])
def test_the_check_catches_each_forbidden_form(tmp_path: Path, where: str, source: str, expected: str) -> None:
    """The check itself can fail: each forbidden form, planted in a scratch tree, is reported."""
    for pkg in ("gangscope/transport", "gangscope/app", "collectors/k8s", "pipeline", "reports", "sql"):
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / where).write_text(source)
    found = violations(tmp_path)
    assert len(found) == 1 and expected in found[0], found
