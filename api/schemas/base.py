"""The base of every request schema: strict types, unknown fields recorded instead of rejected.

Two behaviours exist for a field the schema does not define:

- vLLM's OpenAI server (the default): the field is accepted and ignored, and
  the server logs a WARNING ``The following fields were present in the
  request but ignored: {...}``.  Loom logs each field path once per process
  (not once per request), so a client that always sends, say, ``store`` does
  not flood the log.
- OpenAI's API (``loom serve --strict``): a 400 naming the field
  (``param="messages.0.mood"``).

Pydantic runs before the route knows the server's settings, so validation only
*records* unknown fields (``extra="ignore"`` plus a wrap validator storing the
names on the instance); the route then calls :func:`check_unknown_fields` with
the server's ``strict`` setting.  Ignored fields never reach ``model_dump`` (a
tool definition's stray key is not passed on to the chat template).

Known fields keep strict types (``"stream": 0`` or ``"max_tokens": "5"`` is a
400 naming the field), as the documented types say.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

from loom.runtime.errors import InvalidRequestError

log = logging.getLogger(__name__)


class RequestModel(BaseModel):
    """Base of request bodies and their nested objects (subclass it for every request schema).

    ``ignored_fields(model)`` lists the unknown fields of a validated request,
    nested ones included, as dotted paths (``"messages.0.mood"``).
    """

    model_config = ConfigDict(extra="ignore", strict=True)
    _unknown: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _record_unknown(cls, data: Any, handler: Any) -> Any:
        obj = handler(data)
        if isinstance(data, dict) and isinstance(obj, RequestModel):
            known = _known_names(type(obj))
            unknown = tuple(str(k) for k in data if k not in known)
            if unknown:
                obj._unknown = unknown
        return obj


def _known_names(cls: type[BaseModel]) -> frozenset[str]:
    names = set()
    for name, info in cls.model_fields.items():
        names.add(name)
        if info.alias:
            names.add(info.alias)
        if info.validation_alias and isinstance(info.validation_alias, str):
            names.add(info.validation_alias)
    return frozenset(names)


def ignored_fields(value: Any, path: str = "") -> list[str]:
    """Dotted paths of the fields a validated request did not define, in request order.

    Walks nested request models, lists and dict values (``messages.0.mood``,
    ``response_format.json_schema.extra``).
    """
    found: list[str] = []
    if isinstance(value, RequestModel):
        found += [f"{path}{name}" for name in value._unknown]
        for name in type(value).model_fields:
            found += ignored_fields(getattr(value, name), f"{path}{name}.")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found += ignored_fields(item, f"{path}{i}.")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (RequestModel, list, dict)):
                found += ignored_fields(item, f"{path}{key}.")
    return found


_logged: set[str] = set()
_logged_lock = threading.Lock()


def _generic(path: str) -> str:
    """``messages.3.mood`` -> ``messages.*.mood`` (one log line per field, not per list index)."""
    return ".".join("*" if part.isdigit() else part for part in path.split("."))


def check_unknown_fields(body: RequestModel, strict: bool) -> list[str]:
    """Apply the server's policy to ``body``'s unknown fields; returns their paths.

    Non-strict (vLLM): each field path not seen before in this process is
    logged once at WARNING.  Strict (OpenAI): the first unknown field is an error.

    Raises:
        InvalidRequestError: ``strict`` and an unknown field is present
            (``param`` is its dotted path; HTTP 400).
    """
    paths = ignored_fields(body)
    if not paths:
        return paths
    if strict:
        raise InvalidRequestError(f"Unknown field: {paths[0]!r}", param=paths[0])
    with _logged_lock:
        new = {p for p in map(_generic, paths) if p not in _logged}
        _logged.update(new)
    if new:
        log.warning("The following fields were present in the request but ignored: %s", new)
    return paths


def strict_setting(settings: Any) -> bool:
    """The server's ``strict`` setting (``loom serve --strict``); ``False`` when absent."""
    return bool(getattr(settings, "strict", False))
