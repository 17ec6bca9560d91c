"""Typed identifiers shared by every layer (STYLE.md rule 5).

``NewType`` wrappers cost nothing at run time and keep node ids, epochs and
offsets from being mixed up in signatures.
"""

from __future__ import annotations

from typing import NewType

NodeId = NewType("NodeId", int)
"""A broker or controller ``node.id``; -1 means none/unknown."""

Epoch = NewType("Epoch", int)
"""A raft epoch or a partition leader epoch; -1 means none/unknown."""

Offset = NewType("Offset", int)
"""A log offset (a record's position in a partition's log)."""

NO_NODE = NodeId(-1)
NO_EPOCH = Epoch(-1)
