"""Moved to :mod:`kraftlog.ids` (the one module of shared identifiers): import it from there.

Kept only so that code written against the old place keeps importing while branches in
flight merge; nothing in this repository imports it. Delete it once they have.
"""

from kraftlog.ids import (
    MAX_PARTITION,
    MAX_TOPIC_NAME_LENGTH,
    METADATA_PARTITION_DIR,
    TopicPartition,
    parse_dir_name,
    validate_topic_name,
)

__all__ = ['MAX_PARTITION', 'MAX_TOPIC_NAME_LENGTH', 'METADATA_PARTITION_DIR', 'TopicPartition', 'parse_dir_name', 'validate_topic_name']
