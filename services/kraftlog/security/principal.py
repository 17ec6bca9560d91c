"""Who is calling: principals from certificate subjects, and which principal a node is.

Owns two pure parsers and what they decide:

- Kafka's ``ssl.principal.mapping.rules`` (KIP-371): a list of ``DEFAULT`` and
  ``RULE:pattern/replacement/[LU]`` entries separated by commas or newlines (a pattern may
  hold commas: it ends at its unescaped ``/``). The first rule whose pattern matches the
  whole subject DN (RFC 2253, as the TLS layer prints it) maps it: the replacement may
  name groups as ``$1``, and ``L``/``U`` lower- or upper-case the result; ``DEFAULT``
  keeps the DN. No rule matching is an authentication failure (Kafka's
  ``NoMatchingRule``). The principal is ``User:<mapped name>``; the default rule list is
  ``DEFAULT``, so the default principal is ``User:<full DN>`` as in Kafka.
- :class:`NodePrincipal`: the principal a node id must present (beyond Kafka: a replica
  Fetch, a heartbeat or a raft Vote that names node N is accepted only from N's own
  certificate). ``CN:broker-{id}`` compares the certificate's common name,
  ``User:...{id}...`` the mapped principal.

Callers: :mod:`.config` (parsing settings), :mod:`.tls` (the interceptor that maps each
caller), the broker, controller and raft servicers (identity checks). Pure: no I/O, no
grpc, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kraftlog.errors import ConfigError

USER_TYPE = "User"
DEFAULT_RULES = "DEFAULT"


@dataclass(frozen=True, slots=True, kw_only=True)
class Peer:
    """An authenticated caller: its certificate's subject and common name, and the
    principal the mapping rules gave it (``User:...``)."""

    subject: str
    common_name: str
    principal: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One mapping rule; ``pattern`` None is ``DEFAULT``. ``replacement`` is a sequence of
    literal text (str) and group numbers (int)."""

    pattern: re.Pattern[str] | None
    replacement: tuple[str | int, ...] = ()
    case: str = ""  # "", "L" or "U"

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        match = self.pattern.fullmatch(subject)
        if match is None:
            return None
        parts: list[str] = []
        for piece in self.replacement:
            if isinstance(piece, int):
                if piece > (self.pattern.groups or 0):
                    return None  # Java throws for a missing group: no mapping
                parts.append(match.group(piece) or "")
            else:
                parts.append(piece)
        result = "".join(parts)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _read_until_slash(text: str, start: int, what: str) -> tuple[str, int]:
    """The text from ``start`` to the next unescaped ``/`` (kept escapes), and the index
    after that slash."""
    out: list[str] = []
    index = start
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            out.append(text[index:index + 2])
            index += 2
            continue
        if char == "/":
            return "".join(out), index + 1
        out.append(char)
        index += 1
    raise ConfigError(f"ssl.principal.mapping.rules: the {what} of the rule starting at "
                      f"{text[start - 5:start + 20]!r} has no closing '/'")


def _parse_replacement(text: str) -> tuple[str | int, ...]:
    """Java's replacement syntax: ``$n`` names group n, ``\\x`` is a literal x."""
    pieces: list[str | int] = []
    literal: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            literal.append(text[index + 1])
            index += 2
        elif char == "$" and index + 1 < len(text) and text[index + 1].isdigit():
            end = index + 1
            while end < len(text) and text[end].isdigit():
                end += 1
            if literal:
                pieces.append("".join(literal))
                literal = []
            pieces.append(int(text[index + 1:end]))
            index = end
        else:
            literal.append(char)
            index += 1
    if literal:
        pieces.append("".join(literal))
    return tuple(pieces)


def parse_rules(text: str) -> tuple[Rule, ...]:
    """``ssl.principal.mapping.rules`` as rules, in order; ConfigError naming the bad one."""
    rules: list[Rule] = []
    index = 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            break
        if text.startswith("DEFAULT", index):
            rules.append(Rule(pattern=None))
            index += len("DEFAULT")
        elif text.startswith("RULE:", index):
            start = index + len("RULE:")
            pattern_text, index = _read_until_slash(text, start, "pattern")
            replacement_text, index = _read_until_slash(text, index, "replacement")
            case = ""
            if index < len(text) and text[index] in "LU":
                case = text[index]
                index += 1
            try:
                pattern = re.compile(pattern_text)
            except re.error as exc:
                raise ConfigError(f"ssl.principal.mapping.rules: pattern {pattern_text!r} "
                                  f"is not a valid regular expression: {exc}") from None
            rules.append(Rule(pattern=pattern, replacement=_parse_replacement(replacement_text),
                              case=case))
        else:
            end = min((p for p in (text.find(",", index), text.find("\n", index)) if p >= 0),
                      default=len(text))
            raise ConfigError(f"ssl.principal.mapping.rules: {text[index:end].strip()!r} is "
                              "neither DEFAULT nor RULE:pattern/replacement/[LU]")
        while index < len(text) and text[index] in " \t":
            index += 1
        if index < len(text):
            if text[index] not in ",\n":
                raise ConfigError(f"ssl.principal.mapping.rules: unexpected "
                                  f"{text[index:index + 20]!r} after a rule (expected ',')")
            index += 1
    if not rules:
        raise ConfigError("ssl.principal.mapping.rules is empty; use DEFAULT")
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    """Subject DN -> principal, by the first rule that applies."""

    rules: tuple[Rule, ...]

    @classmethod
    def from_text(cls, text: str = DEFAULT_RULES) -> PrincipalMapper:
        return cls(parse_rules(text))

    def principal_name(self, subject: str) -> str | None:
        """The mapped name, ``None`` when no rule applies (authentication fails)."""
        for rule in self.rules:
            name = rule.apply(subject)
            if name is not None:
                return name
        return None

    def principal(self, subject: str) -> str | None:
        name = self.principal_name(subject)
        return None if name is None else f"{USER_TYPE}:{name}"


# -- node identity --------------------------------------------------------------------------------

DEFAULT_BROKER_PRINCIPAL = "CN:broker-{id}"
DEFAULT_CONTROLLER_PRINCIPAL = "CN:controller-{id}"


@dataclass(frozen=True, slots=True)
class NodePrincipal:
    """The principal node ``{id}`` must present: ``CN:<template>`` (the certificate's
    common name) or ``User:<template>`` (the mapped principal)."""

    field: str  # "CN" or "User"
    template: str

    @classmethod
    def parse(cls, text: str, *, key: str) -> NodePrincipal:
        kind, sep, template = text.partition(":")
        if not sep or kind not in ("CN", USER_TYPE) or "{id}" not in template:
            raise ConfigError(f"{key}={text!r}: expected CN:<name with {{id}}> or "
                              "User:<principal name with {id}>")
        return cls(kind, template)

    def expected(self, node_id: int) -> str:
        return self.template.replace("{id}", str(node_id))

    def matches(self, peer: Peer, node_id: int) -> bool:
        if self.field == "CN":
            return peer.common_name == self.expected(node_id)
        return peer.principal == f"{USER_TYPE}:{self.expected(node_id)}"


def any_matches(identities: Sequence[NodePrincipal], peer: Peer, node_id: int) -> bool:
    return any(identity.matches(peer, node_id) for identity in identities)
