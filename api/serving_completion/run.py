"""Shape the engine's outputs of one ``/v1/completions`` request as OpenAI ``text_completion`` objects.

A request with ``P`` prompts and ``n`` samples each has ``P * n`` choices;
choice ``p * n + j`` is sample ``j`` of prompt ``p`` (vLLM's order).  With
``echo`` a choice's text starts with its prompt (``max_tokens=0``: the prompt
alone).  ``logprobs`` follow OpenAI's legacy shape: per token its text, its
log-probability (the engine's raw model log-probabilities, as vLLM; ``-inf``
as -9999.0, as vLLM), a ``{token text: logprob}`` dict of the ``logprobs``
most likely tokens plus the chosen one (so up to ``logprobs + 1`` entries,
OpenAI), and its character offset in ``text``.  With ``echo`` the prompt's
tokens come first; the first has no logprob (``null``, as OpenAI and vLLM).
Offsets count complete characters of the tokens' exact bytes, so a character
split over two byte-level tokens sits at one offset; special tokens left out
of the text (``skip_special_tokens``) take no room.

A stream sends one chunk per engine output that adds text or tokens (the
first chunk of an echoing choice carries the prompt); its pieces concatenate
to the non-streamed choice, logprobs included.  Usage counts each prompt once
and sums the generated tokens of every choice (none for ``max_tokens=0``);
``cached_tokens`` sums each prompt's first sample's prefix-cache hits.
"""

from __future__ import annotations

import codecs
import time
import uuid
from dataclasses import dataclass, field
from typing import Literal

from loom.api.serving_chat.logprobs import TokenText, finite_logprob
from loom.api.serving_completion.prompts import CompletionPrompt, PreparedCompletion
from loom.api.engine_io import served_finish_reason
from loom.api.schemas.chat import PromptTokensDetails, Usage
from loom.api.schemas.completions import Completion, CompletionChoice, CompletionLogprobs
from loom.orchestrator.protocols import Tokenizer
from loom.runtime.outputs import RequestOutput


class _Offsets:
    """Character offset of each next token in the text its predecessors spell (exact bytes, UTF-8)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.chars = 0

    def take(self, raw: bytes) -> int:
        offset = self.chars
        self.chars += len(self._decoder.decode(raw))
        return offset


@dataclass
class ChoiceState:
    """One choice: its prompt, the last ``RequestOutput`` read, and what a stream has sent."""

    index: int
    prompt: CompletionPrompt
    last: RequestOutput | None = None
    prompt_logprobs: list[dict[int, float] | None] | None = None
    sent_tokens: int = 0  # output tokens whose logprobs were sent (stream)
    sent_ids: int = 0  # output tokens whose ids were sent (stream, return_token_ids)
    seen_tokens: int = 0  # output tokens of the last output a stream chunk was made for
    opened: bool = False  # the choice's first chunk was made (stream)
    offsets: _Offsets = field(default_factory=_Offsets)


@dataclass
class CompletionRun:
    """A request's choices, fed with ``(index, RequestOutput)`` and shaped into completions or chunks."""

    prepared: PreparedCompletion
    model: str
    tokenizer: Tokenizer
    request_id: str = field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        p = self.prepared
        self.choices = [ChoiceState(i, p.prompts[i // p.n]) for i in range(len(p.prompts) * p.n)]
        self.text_of = TokenText(self.tokenizer)
        skip = p.skip_special_tokens
        self._hidden = frozenset(getattr(self.tokenizer, "all_special_ids", ()) or ()) if skip else frozenset()

    def feed(self, index: int, out: RequestOutput) -> None:
        """Record choice ``index``'s latest output."""
        choice = self.choices[index]
        choice.last = out
        if out.prompt_logprobs is not None:
            choice.prompt_logprobs = out.prompt_logprobs

    # logprobs ------------------------------------------------------------------------
    def _entries(self, choice: ChoiceState, ids: list[int], rows: list[dict[int, float] | None],
                 into: CompletionLogprobs) -> None:
        top_n = self.prepared.logprobs or 0
        for token, row in zip(ids, rows):
            text, raw = self.text_of(token)
            into.tokens.append(text)
            into.text_offset.append(choice.offsets.take(b"" if token in self._hidden else bytes(raw)))
            if row is None:
                into.token_logprobs.append(None)
                into.top_logprobs.append(None)
                continue
            into.token_logprobs.append(finite_logprob(row.get(token)))
            best = sorted(row.items(), key=lambda kv: -kv[1])[:top_n]
            top = {self.text_of(t)[0]: finite_logprob(lp) for t, lp in best}
            top.setdefault(text, finite_logprob(row.get(token)))
            into.top_logprobs.append(top)

    def _new_logprobs(self, choice: ChoiceState, with_prompt: bool) -> CompletionLogprobs | None:
        """Logprobs of the prompt (when ``with_prompt``) and of output tokens not sent yet."""
        if self.prepared.logprobs is None:
            return None
        lp = CompletionLogprobs()
        if with_prompt:
            rows: list[dict[int, float] | None] = choice.prompt_logprobs or [None for _ in choice.prompt.token_ids]
            self._entries(choice, choice.prompt.token_ids, list(rows), lp)
        out = choice.last
        if out is not None and not self.prepared.echo_only:
            ids = list(out.token_ids)
            rows = list(out.logprobs) if out.logprobs else [None for _ in ids]
            self._entries(choice, ids[choice.sent_tokens:], rows[choice.sent_tokens:], lp)
            choice.sent_tokens = len(ids)
        return lp

    # shaping -------------------------------------------------------------------------
    def _choice(self, choice: ChoiceState, text: str, with_prompt: bool, finished: bool,
                first: bool) -> CompletionChoice:
        out, p = choice.last, self.prepared
        if with_prompt:
            text = choice.prompt.text + text
        return CompletionChoice(
            index=choice.index, text=text, logprobs=self._new_logprobs(choice, with_prompt),
            finish_reason=_finish_reason(out, p.echo_only) if finished else None,
            stop_reason=out.stop_reason if finished and out is not None and not p.echo_only else None,
            prompt_token_ids=list(choice.prompt.token_ids) if p.return_token_ids and first else None,
            token_ids=self._new_ids(choice) if p.return_token_ids else None)

    def _new_ids(self, choice: ChoiceState) -> list[int]:
        """Output ids not sent yet (then marked sent); none for ``max_tokens=0``."""
        if choice.last is None or self.prepared.echo_only:
            return []
        ids = list(choice.last.token_ids)
        start, choice.sent_ids = choice.sent_ids, len(ids)
        return ids[start:]

    def usage(self) -> Usage:
        """OpenAI usage: every prompt once, generated tokens of every choice, cached prompt tokens."""
        p = self.prepared
        prompt = sum(len(x.token_ids) for x in p.prompts)
        completion = 0 if p.echo_only else sum(len(c.last.token_ids) for c in self.choices if c.last)
        cached = sum(c.last.num_cached_tokens for c in self.choices[::p.n] if c.last is not None)
        return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                     prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))

    def result(self) -> Completion:
        """The non-streamed completion (after every choice's last output was fed)."""
        choices = [self._choice(c, "" if self.prepared.echo_only or c.last is None else c.last.text,
                                self.prepared.echo, True, True) for c in self.choices]
        return Completion(id=self.request_id, created=self.created, model=self.model, choices=choices,
                          usage=self.usage())

    def chunk(self, index: int, out: RequestOutput, continuous_usage: bool = False) -> Completion | None:
        """The stream chunk for choice ``index``'s output ``out`` (``None`` when it adds nothing)."""
        choice = self.choices[index]
        self.feed(index, out)
        first, p = not choice.opened, self.prepared
        choice.opened = True
        text = "" if p.echo_only else (out.new_text or "")
        # held-back text (a possible stop string) still sends the tokens' logprobs / ids as they come
        tokens = (p.logprobs is not None or p.return_token_ids) and not p.echo_only \
            and len(out.token_ids) > choice.seen_tokens
        choice.seen_tokens = len(out.token_ids)
        if not (first or text or out.finished or tokens):
            return None
        return Completion(id=self.request_id, created=self.created, model=self.model,
                          choices=[self._choice(choice, text, p.echo and first, bool(out.finished), first)],
                          usage=self.usage() if continuous_usage else None)

    def usage_chunk(self) -> Completion:
        """The ``include_usage`` chunk: no choices, usage set."""
        return Completion(id=self.request_id, created=self.created, model=self.model, choices=[],
                          usage=self.usage())

    def token_classes(self) -> dict[str, int]:
        """Token counts by class for ``loom_tokens`` (prompt cached / computed, outputs)."""
        u = self.usage()
        cached = u.prompt_tokens_details.cached_tokens
        return {"prompt.cached": cached, "prompt.computed": u.prompt_tokens - cached,
                "output": u.completion_tokens}


def _finish_reason(out: RequestOutput | None, echo_only: bool) -> Literal["stop", "length", "abort"] | None:
    if echo_only:
        return "length"
    return served_finish_reason(out.finish_reason) if out is not None else None
