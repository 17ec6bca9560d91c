"""The error codes of the raft RPCs (KIP-595, KIP-630): Kafka's, from :mod:`kraftlog.error_codes`.

Kept as a module of the raft room so its users import ``error_codes.ErrorCode``
from next door; the enum itself is the one shared by every room.
"""

from __future__ import annotations

from kraftlog.error_codes import ErrorCode

__all__ = ["ErrorCode"]
