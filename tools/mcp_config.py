"""MCP servers from a config file in the common ``mcpServers`` format (Claude Desktop, Cursor, VS Code).

```json
{"mcpServers": {
   "weather": {"command": "python", "args": ["weather.py"], "env": {"UNITS": "metric"}},
   "docs":    {"url": "http://127.0.0.1:8765/mcp", "headers": {"Authorization": "Bearer ..."}}
}}
```

JSON or YAML (by file suffix; ``.yaml`` / ``.yml`` is YAML).  An entry with
``command`` is a stdio server (:class:`~loom.tools.mcp.MCPServerStdio`; optional
``args``, ``env``, ``cwd``), one with ``url`` a streamable HTTP server
(:class:`~loom.tools.mcp.MCPServerStreamableHttp`; optional ``headers``).  Loom's
own options may be given per entry: ``prefix_tools``, ``timeout_s``,
``connect_timeout_s``, ``use_structured_content``.  ``type`` /
``transport`` (``stdio``, ``http``, ``streamable-http``, ``streamable_http``)
is accepted and checked against the entry's fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loom.tools.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp

__all__ = ["load_mcp_config", "servers_from_config"]

_OPTIONS = ("prefix_tools", "timeout_s", "connect_timeout_s", "use_structured_content")
_STDIO = {"command", "args", "env", "cwd", "type", "transport", *_OPTIONS}
_HTTP = {"url", "headers", "type", "transport", *_OPTIONS}


def load_mcp_config(path: str | Path) -> list[MCPServer]:
    """The servers of the config file at ``path`` (not connected yet), in name order.

    Raises:
        ValueError: an unreadable file or a bad entry; the message names the file and the
            entry (``mcpServers.<name>.<field>``).
    """
    p = Path(path)
    try:
        text = p.read_text()
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except (OSError, ValueError) as exc:
        raise ValueError(f"mcp config {p}: cannot be read: {str(exc).splitlines()[0] if str(exc) else exc}") from None
    try:
        return servers_from_config(data)
    except ValueError as exc:
        raise ValueError(f"mcp config {p}: {exc}") from None


def servers_from_config(data: Any) -> list[MCPServer]:
    """The servers of a parsed ``{"mcpServers": {...}}`` mapping, in name order.

    Raises:
        ValueError: naming the entry and field.
    """
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise ValueError('expected an object {"mcpServers": {"<name>": {...}}}')
    servers: list[MCPServer] = []
    for name in sorted(data["mcpServers"]):
        entry = data["mcpServers"][name]
        where = f"mcpServers.{name}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected an object with 'command' or 'url'")
        kind = str(entry.get("type") or entry.get("transport") or "").replace("_", "-")
        is_http = "url" in entry
        if ("command" in entry) == is_http:
            raise ValueError(f"{where}: give exactly one of 'command' (stdio) or 'url' (streamable HTTP)")
        if kind and kind not in (("http", "streamable-http") if is_http else ("stdio",)):
            raise ValueError(f"{where}.type: {kind!r} does not match an entry with "
                             f"{'url' if is_http else 'command'}")
        unknown = sorted(set(entry) - (_HTTP if is_http else _STDIO))
        if unknown:
            raise ValueError(f"{where}.{unknown[0]}: unknown field")
        options = {k: entry[k] for k in _OPTIONS if k in entry}
        try:
            if is_http:
                servers.append(MCPServerStreamableHttp(entry["url"], entry.get("headers"), name=name, **options))
            else:
                servers.append(MCPServerStdio(entry["command"], entry.get("args") or (), entry.get("env"),
                                              cwd=entry.get("cwd"), name=name, **options))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    return servers
