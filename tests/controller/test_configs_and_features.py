"""IncrementalAlterConfigs / DescribeConfigs (validation, sources, synonyms) and features."""

from __future__ import annotations

import pytest

from kraftlog.controller import api, config_defs
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.error_codes import ErrorCode
from kraftlog.metadata.records import ConfigRecord, FeatureLevelRecord
from tests.controller.harness import Harness

TOPIC = api.ConfigResourceType.TOPIC
BROKER = api.ConfigResourceType.BROKER


@pytest.fixture
def h() -> Harness:
    harness = Harness(ControllerConfig(min_insync_replicas=2))
    harness.bootstrap()
    harness.start_brokers({1: ""})
    harness.create_topic("t")
    return harness


def _alter(
    h: Harness,
    resource_type: api.ConfigResourceType,
    name: str,
    *changes: api.AlterableConfig,
    validate_only: bool = False,
) -> api.ApiError:
    request = api.IncrementalAlterConfigsRequest(
        resources=(
            api.AlterConfigsResource(
                resource_type=resource_type, resource_name=name, configs=changes
            ),
        ),
        validate_only=validate_only,
    )
    return h.apply(h.state.incremental_alter_configs(request)).responses[0].error


def _set(name: str, value: str) -> api.AlterableConfig:
    return api.AlterableConfig(name=name, value=value)


def _op(name: str, op: api.ConfigOperation, value: str = "") -> api.AlterableConfig:
    return api.AlterableConfig(name=name, config_operation=op, value=value)


def _describe(
    h: Harness, resource_type: api.ConfigResourceType, name: str, *keys: str, **flags: bool
) -> api.DescribeConfigsResult:
    request = api.DescribeConfigsRequest(
        resources=(
            api.DescribeConfigsResource(
                resource_type=resource_type, resource_name=name, configuration_keys=keys
            ),
        ),
        **flags,
    )
    return h.state.describe_configs(request, h.committed).results[0]


def test_set_and_delete_a_topic_config(h: Harness) -> None:
    result = h.state.incremental_alter_configs(
        api.IncrementalAlterConfigsRequest(
            resources=(
                api.AlterConfigsResource(
                    resource_type=TOPIC, resource_name="t", configs=(_set("retention.ms", "100"),)
                ),
            )
        )
    )
    assert result.records == (
        ConfigRecord(resource_type=TOPIC, resource_name="t", name="retention.ms", value="100"),
    )
    h.apply(result)
    assert h.state.configuration.topic_value("t", "retention.ms") == "100"
    assert _alter(h, TOPIC, "t", _op("retention.ms", api.ConfigOperation.DELETE)) == api.NONE
    assert h.state.configuration.topic_value("t", "retention.ms") == "604800000"


def test_append_and_subtract_on_a_list_config(h: Harness) -> None:
    assert (
        _alter(h, TOPIC, "t", _op("cleanup.policy", api.ConfigOperation.APPEND, "compact"))
        == api.NONE
    )
    assert h.state.configuration.topic_value("t", "cleanup.policy") == "delete,compact"
    assert (
        _alter(h, TOPIC, "t", _op("cleanup.policy", api.ConfigOperation.SUBTRACT, "delete"))
        == api.NONE
    )
    assert h.state.configuration.topic_value("t", "cleanup.policy") == "compact"


def test_append_to_a_non_list_config_is_invalid_config(h: Harness) -> None:
    error = _alter(h, TOPIC, "t", _op("retention.ms", api.ConfigOperation.APPEND, "5"))
    assert error.code == ErrorCode.INVALID_CONFIG and "not LIST" in error.message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("retention.ms", "-2"),
        ("retention.bytes", "lots"),
        ("segment.bytes", "3000000000"),
        ("segment.bytes", "10"),
        ("min.insync.replicas", "0"),
        ("unclean.leader.election.enable", "maybe"),
        ("compression.type", "brotli"),
        ("cleanup.policy", "delete,forever"),
        ("max.message.bytes", "-1"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("leader.replication.throttled.replicas", "0-1"),
        ("not.a.config", "1"),
    ],
)
def test_bad_topic_values_and_unknown_names_are_invalid_config(
    h: Harness, name: str, value: str
) -> None:
    error = _alter(h, TOPIC, "t", _set(name, value))
    assert error.code == ErrorCode.INVALID_CONFIG, error
    assert h.state.configuration.get(TOPIC, "t", name) is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("retention.ms", "-1"),
        ("segment.bytes", "1048576"),
        ("compression.type", "zstd"),
        ("unclean.leader.election.enable", "TRUE"),
        ("min.cleanable.dirty.ratio", "0.25"),
        ("leader.replication.throttled.replicas", "0:1,1:2"),
        ("follower.replication.throttled.replicas", "*"),
    ],
)
def test_good_topic_values_are_accepted(h: Harness, name: str, value: str) -> None:
    assert _alter(h, TOPIC, "t", _set(name, value)) == api.NONE


def test_config_of_unknown_topic_is_unknown_topic_or_partition(h: Harness) -> None:
    assert (
        _alter(h, TOPIC, "nope", _set("retention.ms", "1")).code
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )


def test_bad_broker_name_or_resource_type_is_invalid_request(h: Harness) -> None:
    assert _alter(h, BROKER, "x1", _set("log.retention.ms", "1")).code == ErrorCode.INVALID_REQUEST
    assert (
        _alter(h, api.ConfigResourceType.BROKER_LOGGER, "1", _set("a", "b")).code
        == ErrorCode.INVALID_REQUEST
    )


def test_read_only_broker_config_is_invalid_config(h: Harness) -> None:
    assert _alter(h, BROKER, "", _set("num.partitions", "3")).code == ErrorCode.INVALID_CONFIG


def test_duplicate_keys_or_resources_are_invalid_request(h: Harness) -> None:
    error = _alter(h, TOPIC, "t", _set("retention.ms", "1"), _set("retention.ms", "2"))
    assert error.code == ErrorCode.INVALID_REQUEST
    resource = api.AlterConfigsResource(
        resource_type=TOPIC, resource_name="t", configs=(_set("retention.ms", "1"),)
    )
    response = h.apply(
        h.state.incremental_alter_configs(
            api.IncrementalAlterConfigsRequest(resources=(resource, resource))
        )
    )
    assert [r.error.code for r in response.responses] == [ErrorCode.INVALID_REQUEST] * 2


def test_one_bad_config_rejects_its_whole_resource_only(h: Harness) -> None:
    request = api.IncrementalAlterConfigsRequest(
        resources=(
            api.AlterConfigsResource(
                resource_type=TOPIC,
                resource_name="t",
                configs=(_set("retention.ms", "1"), _set("segment.bytes", "x")),
            ),
            api.AlterConfigsResource(
                resource_type=BROKER, resource_name="", configs=(_set("log.retention.ms", "7"),)
            ),
        )
    )
    response = h.apply(h.state.incremental_alter_configs(request))
    assert [r.error.code for r in response.responses] == [ErrorCode.INVALID_CONFIG, ErrorCode.NONE]
    assert h.state.configuration.get(TOPIC, "t", "retention.ms") is None


def test_validate_only_writes_nothing(h: Harness) -> None:
    result = h.state.incremental_alter_configs(
        api.IncrementalAlterConfigsRequest(
            resources=(
                api.AlterConfigsResource(
                    resource_type=TOPIC, resource_name="t", configs=(_set("retention.ms", "5"),)
                ),
            ),
            validate_only=True,
        )
    )
    assert result.records == () and result.response.responses[0].error == api.NONE


def test_effective_min_isr_and_unclean_follow_topic_then_cluster_then_static(h: Harness) -> None:
    configuration = h.state.configuration
    assert configuration.effective_min_isr("t") == 2  # static ControllerConfig
    _alter(h, BROKER, "", _set("min.insync.replicas", "3"))
    assert configuration.effective_min_isr("t") == 3  # dynamic cluster default
    _alter(h, TOPIC, "t", _set("min.insync.replicas", "1"))
    assert configuration.effective_min_isr("t") == 1  # topic override
    assert not configuration.unclean_leader_election_enabled("t")
    _alter(h, BROKER, "", _set("unclean.leader.election.enable", "true"))
    assert configuration.unclean_leader_election_enabled("t")


def test_describe_topic_reports_values_sources_and_synonyms(h: Harness) -> None:
    _alter(h, TOPIC, "t", _set("retention.ms", "10"))
    _alter(h, BROKER, "", _set("log.retention.bytes", "99"))
    result = _describe(
        h,
        TOPIC,
        "t",
        "retention.ms",
        "retention.bytes",
        "min.insync.replicas",
        "segment.ms",
        "no.such",
        include_synonyms=True,
        include_documentation=True,
    )
    by_name = {c.name: c for c in result.configs}
    assert set(by_name) == {"retention.ms", "retention.bytes", "min.insync.replicas", "segment.ms"}
    assert (by_name["retention.ms"].value, by_name["retention.ms"].config_source) == (
        "10",
        api.ConfigSource.DYNAMIC_TOPIC_CONFIG,
    )
    assert (by_name["retention.bytes"].value, by_name["retention.bytes"].config_source) == (
        "99",
        api.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert by_name["retention.bytes"].synonyms[0].name == "log.retention.bytes"
    assert (by_name["min.insync.replicas"].value, by_name["min.insync.replicas"].config_source) == (
        "2",
        api.ConfigSource.STATIC_BROKER_CONFIG,
    )
    assert (by_name["segment.ms"].value, by_name["segment.ms"].config_source) == (
        "604800000",
        api.ConfigSource.DEFAULT_CONFIG,
    )
    assert by_name["segment.ms"].documentation


def test_describe_all_topic_configs_lists_the_whole_catalogue(h: Harness) -> None:
    result = _describe(h, TOPIC, "t")
    assert [c.name for c in result.configs] == sorted(config_defs.TOPIC_CONFIGS)
    assert all(c.synonyms == () and c.documentation == "" for c in result.configs)


def test_describe_broker_prefers_broker_then_cluster_default(h: Harness) -> None:
    _alter(h, BROKER, "", _set("num.replica.fetchers", "2"))
    _alter(h, BROKER, "1", _set("num.replica.fetchers", "4"))
    one = {
        c.name: c
        for c in _describe(h, BROKER, "1", "num.replica.fetchers", "num.partitions").configs
    }
    assert (one["num.replica.fetchers"].value, one["num.replica.fetchers"].config_source) == (
        "4",
        api.ConfigSource.DYNAMIC_BROKER_CONFIG,
    )
    assert one["num.partitions"].read_only
    other = _describe(h, BROKER, "2", "num.replica.fetchers").configs[0]
    assert (other.value, other.config_source) == (
        "2",
        api.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )


def test_describe_unknown_topic_is_unknown_topic_or_partition(h: Harness) -> None:
    assert _describe(h, TOPIC, "nope").error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_describe_reads_the_committed_epoch(h: Harness) -> None:
    before = h.committed
    _alter(h, TOPIC, "t", _set("retention.ms", "10"))
    request = api.DescribeConfigsRequest(
        resources=(
            api.DescribeConfigsResource(
                resource_type=TOPIC, resource_name="t", configuration_keys=("retention.ms",)
            ),
        )
    )
    assert h.state.describe_configs(request, before).results[0].configs[0].value == "604800000"


def test_topic_configs_are_removed_with_the_topic(h: Harness) -> None:
    _alter(h, TOPIC, "t", _set("retention.ms", "10"))
    h.apply(
        h.state.delete_topics(api.DeleteTopicsRequest(topics=(api.DeleteTopicState(name="t"),)))
    )
    h.create_topic("t")
    assert h.state.configuration.topic_value("t", "retention.ms") == "604800000"


def test_bootstrap_finalizes_metadata_version_and_level_zero_removes_a_feature() -> None:
    h = Harness()
    assert h.state.features.metadata_version() == 0
    h.bootstrap()
    assert h.state.features.metadata_version() == 1
    h.replay_all([FeatureLevelRecord(name="metadata.version", feature_level=0)])
    assert h.state.features.finalized() == {}


def test_the_timestamp_bounds_are_topic_configs_with_broker_synonyms() -> None:
    for name in ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms"):
        definition = config_defs.TOPIC_CONFIGS[name]
        assert definition.broker_synonym == f"log.{name}"
        assert f"log.{name}" in config_defs.BROKER_CONFIGS
        assert config_defs.validate_value(definition, "3600000") is None
        assert config_defs.validate_value(definition, "-1") is not None
