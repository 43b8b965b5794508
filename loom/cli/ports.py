"""The port ``loom serve`` listens on, checked before the model loads.

Binding first (then letting go) means a busy port fails in well under a second,
as one line, instead of after the model has loaded.  uvicorn binds the port again
when it starts; between the two the port is free for anyone (a race the check
cannot close; uvicorn then says why it could not bind).
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path


class PortError(Exception):
    """The port cannot be listened on; the message is one line (``port 8000 on 127.0.0.1 is in use``)."""


def check_free(host: str, port: int) -> None:
    """Bind a TCP socket to ``host:port`` as uvicorn will (``SO_REUSEADDR``), then close it.

    Raises:
        PortError: the port is in use, or the address cannot be bound (one line).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortError(f"port {port} on {host} is in use") from None
            raise PortError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def early_address(config: Path | None, host: str | None, port: int | None) -> tuple[str, int] | None:
    """``loom serve``'s host and port as its settings will resolve them (flags > env > TOML > default).

    Read from pydantic-settings' own sources without validating the other settings
    (one of whose checks loads torch, seconds), so the port is taken first.
    ``None`` when they cannot be read this way (a port that is not a number or out
    of range, say): the full settings then name the problem.
    """
    from pydantic_settings import EnvSettingsSource, TomlConfigSettingsSource

    from loom.api.settings import Settings

    layers: list[dict] = [{"host": host, "port": port}, EnvSettingsSource(Settings)()]
    path = config or os.environ.get("LOOM_CONFIG")
    if path and Path(path).is_file():
        try:
            layers.append(TomlConfigSettingsSource(Settings, toml_file=path)())
        except ValueError:  # not TOML: Settings.load says so
            return None
    layers.append({key: Settings.model_fields[key].default for key in ("host", "port")})
    try:
        host, port = (next(layer[key] for layer in layers if layer.get(key) is not None) for key in ("host", "port"))
        port = int(port)
    except (TypeError, ValueError):
        return None
    return (str(host), port) if 0 <= port < 65536 else None
