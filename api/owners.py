"""Owner names, and moving a server database's owners out of joined names into their own columns.

An owner is who an API key belongs to (``loom keys create --owner``); every
session, memory and document a request touches is the owner's.  Names are
:data:`OWNER_NAME`: they never contain ``:`` or ``/``, the separators older
servers joined names with, and they read safely in logs and URLs.

Servers before owner columns stored an owner's memory namespace as one string,
``f"{owner}::{namespace}"``, in a memory row whose owner was ``""``; and an
owner's document as index id ``f"{owner}/{id}"`` with the owner only in its
metadata.  The memory store and the chunk store now keep the owner in a column
of its own (``loom.memory.models``, ``loom.retrieval.store``), and their own
migrations add those columns, but only the server knows how it joined the
names.  :func:`split_memory_owners` splits the joined namespaces of the server
database; documents keep their ids (the owner's prefix stays part of the
index's key) and get the owner column filled from their metadata by the chunk
store's own migration.

A joined name splits at its first ``::`` and only when the part before it is a
valid owner name (:data:`OWNER_NAME`, which has no ``:``), so the split
is exactly the inverse of the old join; anything else stays a nobody's namespace.
"""

from __future__ import annotations

import logging
import re

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from loom.memory.models import MemoryRow, NamespaceRow

log = logging.getLogger(__name__)

OWNER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")
"""Owner names: letters, digits and ``. _ @ + -``, at most 128 (the owner columns' width), starting with a
letter or digit."""

JOIN = "::"  # how servers before owner columns joined an owner and a namespace


def _split(joined: str) -> tuple[str, str] | None:
    owner, sep, namespace = joined.partition(JOIN)
    return (owner, namespace) if sep and namespace and OWNER_NAME.fullmatch(owner) else None


def split_memory_owners(engine: Engine) -> int:
    """Give every ``owner::namespace`` memory row and lock row of nobody its owner and namespace columns.

    One transaction; a lock row whose split form exists already (cannot happen unless
    two servers raced here) is merged into it keeping the larger revision plus one.
    Returns the number of namespaces split.
    """
    with Session(engine) as session, session.begin():
        joined = session.scalars(select(NamespaceRow.namespace).where(
            NamespaceRow.owner == "", NamespaceRow.namespace.contains(JOIN, autoescape=True))).all()
        joined = sorted({*joined, *session.scalars(select(MemoryRow.namespace).distinct().where(
            MemoryRow.owner == "", MemoryRow.namespace.contains(JOIN, autoescape=True))).all()})
        done = 0
        for name in joined:
            parts = _split(name)
            if parts is None:
                continue
            owner, namespace = parts
            session.execute(update(MemoryRow).where(MemoryRow.owner == "", MemoryRow.namespace == name)
                            .values(owner=owner, namespace=namespace).execution_options(synchronize_session=False))
            old = session.get(NamespaceRow, ("", name))
            if old is not None:
                current = session.get(NamespaceRow, (owner, namespace))
                if current is None:
                    session.add(NamespaceRow(owner=owner, namespace=namespace, revision=old.revision))
                else:
                    current.revision = max(current.revision, old.revision) + 1
                session.delete(old)
            done += 1
    if done:
        log.info("memory: moved the owners of %d namespaces into the owner column", done)
    return done
