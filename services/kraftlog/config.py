"""Kafka-style configuration: ``server.properties`` files, typed definitions, overrides.

Every process (``kraftlog controller``, ``kraftlog broker``, ...) reads one
properties file in Java's format and applies ``--override key=value`` flags on
top, exactly as Kafka's ``kafka-server-start.sh config --override`` does. Names,
types, defaults and units follow Kafka (KafkaConfig, RaftConfig, LogConfig), so an
operator's existing knowledge and files carry over.

This module owns parsing and validation only. It does no I/O beyond reading the
file it is given, and never guesses: an unknown type, a bad number or a value
out of range is a :class:`kraftlog.errors.ConfigError` naming the key (and the
file and line when it came from a file). Unknown keys are kept and reported by
:meth:`Config.unused` (Kafka logs them as warnings) rather than rejected, so a
Kafka properties file with settings we do not implement still loads.
"""

from __future__ import annotations

import enum
import pathlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kraftlog.errors import ConfigError


class ConfigType(enum.Enum):
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"
    PASSWORD = "password"


ConfigValue = int | float | bool | str | list[str] | None
Validator = Callable[[str, ConfigValue], None]
"""Raises ConfigError(key ...) when the (already typed) value is not acceptable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigKey:
    """One documented setting: its Kafka name, type, default (None = required) and doc."""

    name: str
    type: ConfigType
    default: ConfigValue
    doc: str
    validator: Validator | None = None
    required: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where a raw value came from, for error messages."""

    origin: str
    line: int = 0

    def __str__(self) -> str:
        return f"{self.origin}:{self.line}" if self.line else self.origin


def at_least(minimum: float) -> Validator:
    def check(key: str, value: ConfigValue) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool) and value < minimum:
            raise ConfigError(f"{key}={value}: must be at least {minimum}")

    return check


def between(minimum: float, maximum: float) -> Validator:
    def check(key: str, value: ConfigValue) -> None:
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and not minimum <= value <= maximum
        ):
            raise ConfigError(f"{key}={value}: must be between {minimum} and {maximum}")

    return check


def one_of(*allowed: str) -> Validator:
    def check(key: str, value: ConfigValue) -> None:
        values = value if isinstance(value, list) else [value]
        for item in values:
            if item not in allowed:
                raise ConfigError(f"{key}={value}: {item!r} is not one of {', '.join(allowed)}")

    return check


def _convert(key: ConfigKey, raw: str, source: Source) -> ConfigValue:
    text = raw.strip()
    try:
        if key.type in (ConfigType.INT, ConfigType.LONG):
            number = int(text)
            limit = 2**31 if key.type is ConfigType.INT else 2**63
            if not -limit <= number < limit:
                raise ValueError(f"out of range for {key.type.value}")
            return number
        if key.type is ConfigType.DOUBLE:
            return float(text)
        if key.type is ConfigType.BOOLEAN:
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ValueError("expected true or false")
            return lowered == "true"
        if key.type is ConfigType.LIST:
            return [item.strip() for item in text.split(",") if item.strip()]
        return text
    except ValueError as exc:
        raise ConfigError(
            f"{source}: {key.name}={raw!r} is not a valid {key.type.value}: {exc}"
        ) from None


class ConfigDef:
    """The set of settings a process understands (Kafka's ``ConfigDef``)."""

    def __init__(self, keys: Iterable[ConfigKey] = ()) -> None:
        self._keys: dict[str, ConfigKey] = {}
        for key in keys:
            self.define(key)

    def define(self, key: ConfigKey) -> None:
        if key.name in self._keys:
            raise ValueError(f"config {key.name} defined twice")
        self._keys[key.name] = key

    def keys(self) -> Mapping[str, ConfigKey]:
        return self._keys

    def parse(
        self,
        raw: Mapping[str, str],
        *,
        sources: Mapping[str, Source] | None = None,
    ) -> Config:
        """Type and validate ``raw`` values; fill defaults; fail on the first bad one."""
        values: dict[str, ConfigValue] = {}
        for name, key in self._keys.items():
            source = (sources or {}).get(name, Source(origin="config"))
            if name in raw:
                value = _convert(key, raw[name], source)
            elif key.required:
                raise ConfigError(f"missing required config {name}: {key.doc}")
            else:
                value = key.default
            if key.validator is not None and value is not None:
                try:
                    key.validator(name, value)
                except ConfigError as exc:
                    raise ConfigError(f"{source}: {exc}") from None
            values[name] = value
        unused = sorted(set(raw) - set(self._keys))
        return Config(values=values, unused_keys=tuple(unused), raw=dict(raw))


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """Parsed, typed settings. Typed getters raise if a key has the wrong type."""

    values: Mapping[str, ConfigValue]
    unused_keys: tuple[str, ...] = ()
    raw: Mapping[str, str] = field(default_factory=dict)

    def _get(self, name: str) -> ConfigValue:
        try:
            return self.values[name]
        except KeyError:
            raise ConfigError(f"unknown config {name}") from None

    def get_int(self, name: str) -> int:
        value = self._get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"config {name} is not an integer: {value!r}")
        return value

    def get_optional_int(self, name: str) -> int | None:
        value = self._get(name)
        return None if value is None else self.get_int(name)

    def get_bool(self, name: str) -> bool:
        value = self._get(name)
        if not isinstance(value, bool):
            raise ConfigError(f"config {name} is not a boolean: {value!r}")
        return value

    def get_float(self, name: str) -> float:
        value = self._get(name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ConfigError(f"config {name} is not a number: {value!r}")
        return float(value)

    def get_str(self, name: str) -> str:
        value = self._get(name)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise ConfigError(f"config {name} is not a string: {value!r}")
        return value

    def get_list(self, name: str) -> list[str]:
        value = self._get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise ConfigError(f"config {name} is not a list: {value!r}")
        return list(value)

    def unused(self) -> tuple[str, ...]:
        """Keys that were given but that no definition knows (Kafka warns about these)."""
        return self.unused_keys


def parse_properties(text: str, *, origin: str = "<string>") -> tuple[dict[str, str], dict[str, Source]]:
    """Parse Java ``.properties`` text: ``#``/``!`` comments, ``=``/``:``/space separators,
    backslash line continuations and escapes. Returns values and where each came from."""
    values: dict[str, str] = {}
    sources: dict[str, Source] = {}
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        start_line = index + 1
        line = lines[index].lstrip()
        index += 1
        if not line or line[0] in "#!":
            continue
        # A line ending in an odd number of backslashes continues on the next line.
        while _continues(line) and index < len(lines):
            line = line[:-1] + lines[index].lstrip()
            index += 1
        if _continues(line):
            line = line[:-1]
        key, value = _split_key_value(line)
        if not key:
            raise ConfigError(f"{origin}:{start_line}: line has no key: {line!r}")
        values[key] = value
        sources[key] = Source(origin=origin, line=start_line)
    return values, sources


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    chars = iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        nxt = next(chars, "")
        if nxt == "u":
            digits = "".join(next(chars, "") for _ in range(4))
            try:
                out.append(chr(int(digits, 16)))
            except ValueError:
                raise ConfigError(f"malformed \\u escape: \\u{digits}") from None
        else:
            out.append(_ESCAPES.get(nxt, nxt))
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    escaped = False
    for position, char in enumerate(line):
        if escaped:
            escaped = False
            continue
        if char == "\\":
            escaped = True
            continue
        if char in "=: \t":
            key = line[:position]
            rest = line[position + 1 :].lstrip(" \t")
            # "key = value": whitespace may stand before the real separator.
            if char in " \t" and rest[:1] in ("=", ":"):
                rest = rest[1:].lstrip(" \t")
            return _unescape(key), _unescape(rest)
    return _unescape(line), ""


def load_properties(path: str | pathlib.Path) -> tuple[dict[str, str], dict[str, Source]]:
    """Read a properties file; a missing or undecodable file is a ConfigError naming it."""
    file = pathlib.Path(path)
    try:
        text = file.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {file} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {file} is a directory") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {file} is not UTF-8 text: {exc}") from None
    return parse_properties(text, origin=str(file))


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """``--override key=value`` flags (Kafka's kafka-server-start.sh syntax)."""
    parsed: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override {item!r}: expected key=value")
        parsed[key.strip()] = value.strip()
    return parsed


def load(
    definition: ConfigDef,
    path: str | pathlib.Path | None,
    overrides: Iterable[str] = (),
) -> Config:
    """File (if any), then overrides on top, parsed against ``definition``."""
    raw: dict[str, str] = {}
    sources: dict[str, Source] = {}
    if path is not None:
        raw, sources = load_properties(path)
    for key, value in parse_overrides(overrides).items():
        raw[key] = value
        sources[key] = Source(origin=f"--override {key}")
    return definition.parse(raw, sources=sources)
