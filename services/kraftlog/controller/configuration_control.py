"""ConfigurationControlManager: dynamic topic and broker configs in timeline state.

Owns the dynamic config values (ConfigRecords replayed), their validation
(known names, typed values: :mod:`config_defs`), IncrementalAlterConfigs
record generation, DescribeConfigs with sources and synonyms, and the
effective values other managers need (``min.insync.replicas`` and
``unclean.leader.election.enable`` per topic: topic override, then the
dynamic cluster default, then the controller's static config, then Kafka's
default). After Kafka's ``ConfigurationControlManager``.

Called by ControllerState. Generation reads LATEST and changes nothing; only
``replay``/``delete_topic_configs`` (from replay) change state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kraftlog.controller import api, config_defs
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.controller.result import ControllerResult
from kraftlog.error_codes import ErrorCode
from kraftlog.metadata.records import ConfigRecord, ConfigResourceType
from kraftlog.timeline import snapshot_registry, timeline_hash_map

LATEST_EPOCH = snapshot_registry.LATEST_EPOCH
_TOPIC = ConfigResourceType.TOPIC
_BROKER = ConfigResourceType.BROKER
CLUSTER_DEFAULT = ""
"""The BROKER resource name of the cluster-wide dynamic default."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Resolved:
    value: str
    source: api.ConfigSource
    synonyms: tuple[api.DescribeConfigsSynonym, ...]


class ConfigurationControlManager:
    """Dynamic configs keyed by (resource type, resource name, config name)."""

    def __init__(
        self, registry: snapshot_registry.SnapshotRegistry, config: ControllerConfig
    ) -> None:
        self._values: timeline_hash_map.TimelineHashMap[
            tuple[ConfigResourceType, str, str], str
        ] = timeline_hash_map.TimelineHashMap(registry)
        # Which names each resource has set, so a resource lists in O(its configs).
        self._names: timeline_hash_map.TimelineHashMap[
            tuple[ConfigResourceType, str], frozenset[str]
        ] = timeline_hash_map.TimelineHashMap(registry)
        self._static: dict[str, str] = {
            "min.insync.replicas": str(config.min_insync_replicas),
            "unclean.leader.election.enable": _bool(config.unclean_leader_election_enable),
            "auto.leader.rebalance.enable": _bool(config.auto_leader_rebalance_enable),
            "broker.heartbeat.interval.ms": str(config.broker_heartbeat_interval_ms),
            "broker.session.timeout.ms": str(config.broker_session_timeout_ms),
            "default.replication.factor": str(config.default_replication_factor),
            "metadata.max.idle.interval.ms": str(config.metadata_max_idle_interval_ms),
            "num.partitions": str(config.num_partitions),
        }

    # -- replay -----------------------------------------------------------------------

    def replay(self, record: ConfigRecord) -> None:
        key = (record.resource_type, record.resource_name)
        names = self._names.get(key, frozenset())
        if record.value is None:
            self._values.pop((record.resource_type, record.resource_name, record.name), None)
            names = names - {record.name}
        else:
            self._values[(record.resource_type, record.resource_name, record.name)] = record.value
            names = names | {record.name}
        if names:
            self._names[key] = names
        else:
            self._names.pop(key, None)

    def delete_topic_configs(self, topic_name: str) -> None:
        """A topic was removed (replay of RemoveTopicRecord): its configs go with it."""
        names = self._names.pop((_TOPIC, topic_name), frozenset())
        for name in names:
            self._values.pop((_TOPIC, topic_name, name), None)

    # -- reads --------------------------------------------------------------------------

    def get(
        self,
        resource_type: ConfigResourceType,
        resource_name: str,
        name: str,
        epoch: int = LATEST_EPOCH,
    ) -> str | None:
        """The dynamic value set on exactly this resource, or None."""
        return self._values.get((resource_type, resource_name, name), epoch=epoch)

    def resource_configs(
        self, resource_type: ConfigResourceType, resource_name: str, epoch: int = LATEST_EPOCH
    ) -> dict[str, str]:
        names = self._names.get((resource_type, resource_name), frozenset(), epoch=epoch)
        result: dict[str, str] = {}
        for name in sorted(names):
            value = self._values.get((resource_type, resource_name, name), epoch=epoch)
            if value is not None:
                result[name] = value
        return result

    def topic_value(self, topic: str, name: str, epoch: int = LATEST_EPOCH) -> str:
        """A topic config's effective value."""
        return self._resolve_topic(topic, config_defs.TOPIC_CONFIGS[name], epoch).value

    def effective_min_isr(self, topic: str) -> int:
        return int(self.topic_value(topic, "min.insync.replicas"))

    def unclean_leader_election_enabled(self, topic: str) -> bool:
        return self.topic_value(topic, "unclean.leader.election.enable").lower() == "true"

    def _resolve_topic(
        self, topic: str, definition: config_defs.ConfigDef, epoch: int
    ) -> _Resolved:
        chain: list[tuple[str, str | None, api.ConfigSource]] = [
            (
                definition.name,
                self.get(_TOPIC, topic, definition.name, epoch),
                api.ConfigSource.DYNAMIC_TOPIC_CONFIG,
            ),
        ]
        synonym = definition.broker_synonym
        if synonym is not None:
            chain.append(
                (
                    synonym,
                    self.get(_BROKER, CLUSTER_DEFAULT, synonym, epoch),
                    api.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                )
            )
            chain.append(
                (synonym, self._static.get(synonym), api.ConfigSource.STATIC_BROKER_CONFIG)
            )
        return _first_set(chain, definition.default)

    def _resolve_broker(
        self, broker: str, definition: config_defs.ConfigDef, epoch: int
    ) -> _Resolved:
        name = definition.name
        chain: list[tuple[str, str | None, api.ConfigSource]] = []
        if broker != CLUSTER_DEFAULT:
            chain.append(
                (
                    name,
                    self.get(_BROKER, broker, name, epoch),
                    api.ConfigSource.DYNAMIC_BROKER_CONFIG,
                )
            )
        chain.append(
            (
                name,
                self.get(_BROKER, CLUSTER_DEFAULT, name, epoch),
                api.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
            )
        )
        chain.append((name, self._static.get(name), api.ConfigSource.STATIC_BROKER_CONFIG))
        return _first_set(chain, definition.default)

    # -- generation -----------------------------------------------------------------------

    def topic_creation_records(
        self, topic: str, configs: Sequence[api.CreatableTopicConfig]
    ) -> list[ConfigRecord]:
        """ConfigRecords for a new topic's configs; raises RequestError on a bad one."""
        seen: set[str] = set()
        records: list[ConfigRecord] = []
        for config in configs:
            if config.name in seen:
                raise api.RequestError(
                    ErrorCode.INVALID_REQUEST, f"Duplicate config name {config.name}."
                )
            seen.add(config.name)
            definition = _definition(_TOPIC, config.name)
            problem = config_defs.validate_value(definition, config.value)
            if problem is not None:
                raise api.RequestError(ErrorCode.INVALID_CONFIG, problem)
            records.append(
                ConfigRecord(
                    resource_type=_TOPIC,
                    resource_name=topic,
                    name=config.name,
                    value=config.value.strip(),
                )
            )
        return records

    def incremental_alter_configs(
        self,
        request: api.IncrementalAlterConfigsRequest,
        topic_exists: Callable[[str], bool],
    ) -> ControllerResult[api.IncrementalAlterConfigsResponse]:
        records: list[ConfigRecord] = []
        responses: list[api.AlterConfigsResourceResponse] = []
        counts: dict[tuple[ConfigResourceType, str], int] = {}
        for resource in request.resources:
            key = (resource.resource_type, resource.resource_name)
            counts[key] = counts.get(key, 0) + 1
        for resource in request.resources:
            error = api.NONE
            try:
                if counts[(resource.resource_type, resource.resource_name)] > 1:
                    raise api.RequestError(
                        ErrorCode.INVALID_REQUEST,
                        "Each resource must appear at most once in an IncrementalAlterConfigs "
                        "request.",
                    )
                self._check_resource(resource.resource_type, resource.resource_name, topic_exists)
                resource_records = self._alter_resource(resource)
                if not request.validate_only:
                    records.extend(resource_records)
            except api.RequestError as exc:
                error = exc.error
            responses.append(
                api.AlterConfigsResourceResponse(
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    error=error,
                )
            )
        return ControllerResult(
            records=tuple(records),
            response=api.IncrementalAlterConfigsResponse(responses=tuple(responses)),
            is_atomic=True,
        )

    def _check_resource(
        self,
        resource_type: ConfigResourceType,
        resource_name: str,
        topic_exists: Callable[[str], bool],
    ) -> None:
        if resource_type == _TOPIC:
            if not topic_exists(resource_name):
                raise api.RequestError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"The topic '{resource_name}' does not exist.",
                )
        elif resource_type == _BROKER:
            if resource_name != CLUSTER_DEFAULT and not resource_name.isdigit():
                raise api.RequestError(
                    ErrorCode.INVALID_REQUEST,
                    f"Invalid broker name '{resource_name}': a broker id or empty for the "
                    "cluster default.",
                )
        else:
            raise api.RequestError(
                ErrorCode.INVALID_REQUEST,
                f"Unsupported resource type {resource_type.name} for the controller.",
            )

    def _alter_resource(self, resource: api.AlterConfigsResource) -> list[ConfigRecord]:
        rtype, rname = resource.resource_type, resource.resource_name
        names = [c.name for c in resource.configs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise api.RequestError(
                ErrorCode.INVALID_REQUEST, f"Duplicate config keys: {', '.join(duplicates)}."
            )
        records: list[ConfigRecord] = []
        for change in resource.configs:
            definition = _definition(rtype, change.name)
            if definition.read_only:
                raise api.RequestError(
                    ErrorCode.INVALID_CONFIG,
                    f"Cannot update these configs dynamically: {change.name}",
                )
            current = self.get(rtype, rname, change.name)
            new_value: str | None
            op = change.config_operation
            if op is api.ConfigOperation.SET:
                new_value = change.value.strip()
            elif op is api.ConfigOperation.DELETE:
                new_value = None
            else:
                if definition.type is not config_defs.ConfigType.LIST:
                    raise api.RequestError(
                        ErrorCode.INVALID_CONFIG,
                        f"Can't {op.name} to key {change.name} because its type is not LIST.",
                    )
                base = config_defs.split_list(
                    current if current is not None else definition.default
                )
                items = config_defs.split_list(change.value)
                if op is api.ConfigOperation.APPEND:
                    merged = base + [i for i in items if i not in base]
                else:
                    merged = [i for i in base if i not in items]
                new_value = ",".join(merged)
            if new_value is not None:
                problem = config_defs.validate_value(definition, new_value)
                if problem is not None:
                    raise api.RequestError(ErrorCode.INVALID_CONFIG, problem)
            if new_value != current:
                records.append(
                    ConfigRecord(
                        resource_type=rtype, resource_name=rname, name=change.name, value=new_value
                    )
                )
        return records

    # -- DescribeConfigs ------------------------------------------------------------------

    def describe_configs(
        self,
        request: api.DescribeConfigsRequest,
        epoch: int,
        topic_exists: Callable[[str], bool],
    ) -> api.DescribeConfigsResponse:
        results: list[api.DescribeConfigsResult] = []
        for resource in request.resources:
            rtype, rname = resource.resource_type, resource.resource_name
            try:
                self._check_resource(rtype, rname, topic_exists)
            except api.RequestError as exc:
                results.append(
                    api.DescribeConfigsResult(
                        resource_type=rtype, resource_name=rname, error=exc.error
                    )
                )
                continue
            catalogue = config_defs.TOPIC_CONFIGS if rtype == _TOPIC else config_defs.BROKER_CONFIGS
            keys = resource.configuration_keys or tuple(sorted(catalogue))
            configs: list[api.DescribeConfigsResourceResult] = []
            for key in keys:
                definition = catalogue.get(key)
                if definition is None:
                    continue  # Kafka leaves unknown names out
                resolved = (
                    self._resolve_topic(rname, definition, epoch)
                    if rtype == _TOPIC
                    else self._resolve_broker(rname, definition, epoch)
                )
                configs.append(
                    api.DescribeConfigsResourceResult(
                        name=key,
                        value=resolved.value,
                        read_only=definition.read_only,
                        config_source=resolved.source,
                        synonyms=resolved.synonyms if request.include_synonyms else (),
                        documentation=definition.doc if request.include_documentation else "",
                    )
                )
            results.append(
                api.DescribeConfigsResult(
                    resource_type=rtype, resource_name=rname, configs=tuple(configs)
                )
            )
        return api.DescribeConfigsResponse(results=tuple(results))


def _first_set(chain: list[tuple[str, str | None, api.ConfigSource]], default: str) -> _Resolved:
    synonyms = [
        api.DescribeConfigsSynonym(name=name, value=value, source=source)
        for name, value, source in chain
        if value is not None
    ]
    if synonyms:
        return _Resolved(
            value=synonyms[0].value or "", source=synonyms[0].source, synonyms=tuple(synonyms)
        )
    return _Resolved(value=default, source=api.ConfigSource.DEFAULT_CONFIG, synonyms=())


def _definition(resource_type: ConfigResourceType, name: str) -> config_defs.ConfigDef:
    catalogue = config_defs.TOPIC_CONFIGS if resource_type == _TOPIC else config_defs.BROKER_CONFIGS
    definition = catalogue.get(name)
    if definition is None:
        kind = "topic" if resource_type == _TOPIC else "broker"
        raise api.RequestError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {name}")
    return definition


def _bool(value: bool) -> str:
    return "true" if value else "false"
