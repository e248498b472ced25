"""The command frame: every contract command exists, explains itself, and fails in one line."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from gangscope import config
from gangscope.app.cli import build_parser

CONTRACT_COMMANDS = [
    ["demo"], ["run"], ["collect", "k8s"], ["collect", "metrics"], ["capture", "k8s"], ["capture", "metrics"],
    ["replay"], ["simulate"], ["pipeline"], ["models", "build"], ["diagnose"], ["report"], ["sql"],
    ["baseline", "snapshot"], ["baseline", "compare"],
]
SHARED_FLAGS = ["--config", "--bootstrap-servers", "--data", "--cluster", "--catalog"]


@pytest.mark.parametrize("cmd", CONTRACT_COMMANDS, ids=" ".join)
def test_every_command_has_help_with_the_shared_settings(cmd: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*cmd, "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for flag in SHARED_FLAGS:
        assert flag in text, f"{' '.join(cmd)} lacks {flag}"


def _gangscope(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gangscope.app.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_config_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("kafka:\n  partitions: lots\n")
    r = _gangscope("diagnose", "--config", str(bad), "--data", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert "kafka.partitions" in r.stderr
    assert r.stdout == ""


def test_diagnose_on_a_missing_lake_fails_instead_of_answering_empty(tmp_path: Path) -> None:
    r = _gangscope("diagnose", "--data", str(tmp_path / "nowhere"))
    assert r.returncode == 2, r.stdout
    assert "no lake" in r.stderr
    assert not (tmp_path / "nowhere").exists()


def test_every_setting_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()

    def walk(cls: type, prefix: str) -> list[str]:
        names = []
        for f in dataclasses.fields(cls):
            tp = cls.__dataclass_fields__[f.name].type
            sub = getattr(config, tp, None) if isinstance(tp, str) else tp
            if dataclasses.is_dataclass(sub):
                names += walk(sub, f"{prefix}{f.name}.")
            else:
                names.append(f"{prefix}{f.name}")
        return names

    missing = [n for n in walk(config.Settings, "")
               if f"`{n}`" not in doc and f"`{n.rsplit('.', 1)[-1]}`" not in doc]
    assert not missing, f"settings missing from docs/configuration.md: {missing}"
