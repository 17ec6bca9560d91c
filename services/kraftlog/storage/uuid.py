"""Moved to :mod:`kraftlog.ids` (the one module of shared identifiers): import it from there.

Kept only so that code written against the old place keeps importing while branches in
flight merge; nothing in this repository imports it. Delete it once they have.
"""

from kraftlog.ids import (
    ONE_UUID,
    RESERVED,
    RESERVED_DIRECTORY_IDS,
    ZERO_UUID,
    Uuid,
    parse_uuid,
    random_directory_id,
    random_uuid,
)

__all__ = ['ONE_UUID', 'RESERVED', 'RESERVED_DIRECTORY_IDS', 'ZERO_UUID', 'Uuid', 'parse_uuid', 'random_directory_id', 'random_uuid']
