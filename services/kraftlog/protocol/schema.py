"""What a generated message codec knows about each of its fields, as data.

Owns :class:`FieldSpec`, the per-field facts the generator (scripts/gen_kafka_messages.py)
writes into every generated class's ``FIELDS``: name, type, the versions it exists in, the
versions it may be null in, its tag (tagged fields, KIP-482) and its struct class. Callers:
the generated modules and the round-trip property tests, which draw values from it. Pure.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FieldSpec:
    name: str
    type_name: str
    """A primitive (``int32``, ``string``, ``records``, ``uuid``...), ``[]element`` or a struct name."""
    versions: tuple[int, int]
    """Inclusive; low > high: in no version."""
    nullable: tuple[int, int]
    tag: int | None
    default_null: bool
    struct: type | None

    def present(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]

    def nullable_in(self, version: int) -> bool:
        return self.nullable[0] <= version <= self.nullable[1]
