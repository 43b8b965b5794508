"""JSON values: the one place where ``Any`` stands for data whose shape its sender decides.

A tool's arguments, a JSON schema, a request body, a record written as JSON: Loom
passes them on or checks them where they are used.  A leaf module (it imports
nothing of Loom's), so every layer may use it, as ``loom.version``.
"""

from __future__ import annotations

from typing import Any, TypeAlias

JSON: TypeAlias = Any
"""A value decoded from JSON or bound for it (object, array, string, number, bool or null)."""

JSONObject: TypeAlias = dict[str, JSON]
"""A JSON object: a tool's arguments, a JSON schema, a request or record body."""
