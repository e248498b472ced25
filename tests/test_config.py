"""Settings precedence and validation."""

from pathlib import Path

import pytest

from gangscope.config import ConfigError, load


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("cluster: from-file\ndata: /file\nkafka:\n  partitions: 3\n  topic_prefix: f.\n")
    env = {"GANGSCOPE_CLUSTER": "from-env", "GANGSCOPE_KAFKA_PARTITIONS": "5"}
    s = load(f, {"cluster": "from-flag", "data": None}, environ=env)
    assert s.cluster == "from-flag"  # flag beats env
    assert s.kafka.partitions == 5  # env beats file
    assert s.kafka.topic_prefix == "f."  # file beats default
    assert s.data == Path("/file")  # an unset flag does not mask lower layers
    assert s.pipeline.group_id == "gangscope-pipeline"  # default


def test_kafka_security_passthrough_from_env() -> None:
    s = load(environ={"GANGSCOPE_KAFKA_SASL_PLAIN_PASSWORD": "pw", "GANGSCOPE_KAFKA_BOOTSTRAP_SERVERS": "k:9092"})
    assert s.kafka.security == {"sasl_plain_password": "pw"}
    assert s.kafka.bootstrap_servers == "k:9092"
    # Only kafka-python's security settings pass through: another name was handed to the client as a security setting.
    with pytest.raises(ConfigError, match="environment GANGSCOPE_KAFKA_LIBS: unknown setting kafka.libs"):
        load(environ={"GANGSCOPE_KAFKA_LIBS": "/opt/kafka/libs"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kafka:\n  partitions: many\n", "kafka.partitions: expected an integer"),
        ("nonsense: 1\n", "unknown setting 'nonsense'"),
        ("pipeline:\n  flushseconds: 1\n", "pipeline: unknown setting 'flushseconds'"),
        ("kafka:\n  security:\n    sasl_mechanism: PLAIN\n    acks: 0\n", "kafka.security: unknown setting 'acks'"),
        ("log:\n  format: xml\n", "log.format"),
        ("- a\n", "expected a mapping"),
    ],
)
def test_bad_settings_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load(f, environ={})


def test_missing_file_and_unknown_env() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load("/nope.yaml", environ={})
    with pytest.raises(ConfigError, match="GANGSCOPE_PIPELINE_NOPE"):
        load(environ={"GANGSCOPE_PIPELINE_NOPE": "1"})
