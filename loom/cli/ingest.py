"""``loom ingest`` and ``loom search``: build a retrieval index and query it.

Heavy libraries (torch, faiss, sentence-transformers) are imported inside the
commands so ``loom --help`` stays fast.  ``loom ingest`` shows a bar of the chunks
embedded on stderr when stderr is a terminal (tqdm; ``--no-progress`` turns it off).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer


def ingest(
    paths: list[str] = typer.Argument(None, help="Files, folders or stdlib: pseudo-paths "
                                      "(stdlib:, stdlib:topics, stdlib:modules, stdlib:module/os)."),
    index: Path = typer.Option(..., "--index", "-i", help="Index folder (created when missing)."),
    glob: Optional[list[str]] = typer.Option(None, "--glob", "-g", help="Glob pattern for "
                                             "folders, repeatable (default: txt, md, rst, html)."),
    stdlib: bool = typer.Option(False, "--stdlib", help="Also ingest the Python stdlib docs "
                                "(same as the path stdlib:)."),
    model: Optional[str] = typer.Option(None, "--model", help="sentence-transformers name or "
                                        "folder (default all-MiniLM-L6-v2; fixed per index)."),
    chunk_tokens: Optional[int] = typer.Option(None, "--chunk-tokens", help="Chunk size in tokens."),
    overlap_tokens: Optional[int] = typer.Option(None, "--overlap-tokens", help="Overlap in tokens."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="Serving model (name or folder) "
                                            "whose tokenizer also bounds each chunk to --chunk-tokens "
                                            "(fixed per index)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar on a tty."),
) -> None:
    """Ingest documents into a retrieval index (re-ingesting unchanged files adds nothing).

    Example: loom ingest docs/ --stdlib --index .loom/index
    """
    from loom.cli.logs import quiet_logs
    from loom.retrieval.loaders import DEFAULT_PATTERNS
    from loom.retrieval.retriever import Retriever

    quiet_logs()

    paths = list(paths or []) + (["stdlib:"] if stdlib else [])
    if not paths:
        raise typer.BadParameter("give at least one PATH or --stdlib", param_hint="PATHS")
    missing = [p for p in paths if not p.startswith("stdlib:") and not Path(p).exists()]
    if missing:  # before the index is opened: a typo creates no empty index
        typer.secho(f"error: path: {missing[0]} does not exist", fg="red", err=True)
        raise typer.Exit(2)
    try:
        r = Retriever.open(index, embedder=model, chunk_tokens=chunk_tokens,
                           overlap_tokens=overlap_tokens, tokenizer=tokenizer)
        stats = r.ingest(paths, patterns=glob or DEFAULT_PATTERNS,
                         show_progress=None if progress else False)
    except (FileNotFoundError, ValueError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    for path, reason in stats.failures:
        typer.secho(f"skipped {path}: {reason}", fg="yellow", err=True)
    typer.echo(stats.summary())


def search(
    query: str = typer.Argument(..., help="Search text."),
    index: Path = typer.Option(..., "--index", "-i", help="Index folder."),
    k: int = typer.Option(5, "--k", "-k", help="Number of hits."),
    mode: str = typer.Option("hybrid", "--mode", help="hybrid | dense | bm25."),
    document: Optional[str] = typer.Option(None, "--document", help="Only this document id."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per hit."),
    similarity_cutoff: str = typer.Option(
        "auto", "--similarity-cutoff",
        help="Which hits count as related to the query (marked in the table, 'related' in JSON): auto "
             "(the index's measured cutoff, the one agents apply before a model sees a hit), none, or a "
             "cosine similarity in [-1, 1]."),
) -> None:
    """Search a retrieval index (hybrid dense + BM25 by default).

    Every hit is listed, marked related or not by the rule Loom's agents apply before a model
    sees retrieved text (loom.orchestrator.relevance): the unrelated ones are what an agent
    would leave out, and a query the index knows nothing about has no related hit.

    Example: loom search --index .loom/index "os.path.join" --k 3 --json
    """
    from loom.cli.logs import quiet_logs
    from loom.orchestrator.relevance import match_sentences, resolve_cutoff, split_relevant
    from loom.retrieval.retriever import Retriever
    from loom.runtime.errors import NotFoundError

    quiet_logs()

    try:
        cutoff_arg = _cutoff_option(similarity_cutoff)
        r = Retriever.open(index, create=False)
        cutoff = resolve_cutoff(cutoff_arg, r)
        hits = r.search(query, k=k, mode=mode, filters={"document": document} if document else None)
        hits = match_sentences(r, query, hits, cutoff)
    except (NotFoundError, ValueError) as exc:
        typer.secho(f"error: {getattr(exc, 'message', exc)}", fg="red", err=True)
        raise typer.Exit(2) from exc
    shown = {id(h) for h in split_relevant(hits, cutoff)[0]}
    related = [id(h) in shown for h in hits]
    if as_json:
        for h, rel in zip(hits, related):
            sys.stdout.write(json.dumps({
                "chunk_id": h.chunk_id, "score": h.score, "similarity": h.similarity,
                "sentence_similarity": h.sentence_similarity, "related": rel,
                "document": h.document, "title": h.title, "section": h.section, "text": h.text,
                "metadata": h.metadata,
            }, ensure_ascii=False) + "\n")
        return
    caption = "" if cutoff is None else (
        f"related: what an agent shows its model (similarity cutoff {cutoff:.3f})"
        + ("" if any(related) else "; nothing here is related to the query"))
    _print_table(query, hits, related, caption)


def _cutoff_option(value: str) -> float | str | None:
    """``--similarity-cutoff`` as ``resolve_cutoff`` takes it: ``"auto"``, ``None`` for none, or a number.

    Raises:
        ValueError: anything else (the range is checked by ``resolve_cutoff``).
    """
    word = value.strip().lower()
    if word in ("auto", "none"):
        return None if word == "none" else word
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"--similarity-cutoff: must be auto, none or a number in [-1, 1], got {value!r}") from None


def _print_table(query: str, hits: list, related: list[bool], caption: str = "") -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(hits)} hits for {query!r}", caption=caption or None, show_lines=True)
    for col in ("#", "score", "related", "document", "section", "text"):
        table.add_column(col, overflow="fold")
    for n, (h, rel) in enumerate(zip(hits, related), 1):
        text = " ".join(h.text.split())
        table.add_row(str(n), f"{h.score:.4f}", "yes" if rel else "no", h.document, h.section or h.title,
                      text[:240] + ("…" if len(text) > 240 else ""), style=None if rel else "dim")
    Console().print(table)
