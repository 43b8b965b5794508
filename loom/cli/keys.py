"""``loom keys``: create, list and revoke API keys in the server's database."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from loom.api.store import Store

keys_app = typer.Typer(help="Manage API keys (stored as SHA-256 hashes).", no_args_is_help=True)

_DB_HELP = "SQLAlchemy URL of the server database (default: $LOOM_DB or sqlite:///loom.db)."


def _store(db: str | None) -> Store:
    """The key database; one ``error:`` line (exit 2) when it cannot be opened."""
    import os

    from loom.api.store import Store

    url = db or os.environ.get("LOOM_DB") or "sqlite:///loom.db"
    try:
        return Store(url)
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy's URL and driver errors share no base
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        typer.secho(f"error: database {url!r} cannot be opened: {reason}; pass --db with a SQLAlchemy URL, "
                    "e.g. sqlite:///loom.db", fg="red", err=True)
        raise typer.Exit(2) from None


@keys_app.command("create")
def create(
    owner: str = typer.Option(..., "--owner", help="Owner the key's sessions and data belong to."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """Create a key and print it once (only its hash is stored)."""
    from loom.api.auth import create_key

    try:
        key = create_key(_store(db), owner)
    except ValueError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    typer.echo(key)


@keys_app.command("list")
def list_(db: str | None = typer.Option(None, "--db", help=_DB_HELP)) -> None:
    """List keys: id, owner, prefix, created, revoked."""
    from rich.console import Console
    from rich.table import Table

    from loom.api.auth import list_keys

    table = Table("id", "owner", "prefix", "created", "revoked")
    for k in list_keys(_store(db)):
        table.add_row(str(k.id), k.owner, k.prefix + "...", str(k.created_at), str(k.revoked))
    Console().print(table)


@keys_app.command("revoke")
def revoke(
    key_id: str = typer.Argument(..., help="Key id or prefix as `loom keys list` shows it."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """Revoke a key; requests with it get 401 from then on."""
    from loom.api.auth import revoke_key

    n = revoke_key(_store(db), key_id)
    if n == 0:
        typer.secho(f"no key {key_id!r}", fg="red", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {n} key(s)")
