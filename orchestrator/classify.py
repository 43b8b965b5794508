"""Output token classes (``reasoning`` / ``tool_call`` / ``output``) from the engine's own text.

The engine detokenizes once (``runtime.detokenizer``: whole UTF-8
characters, stop strings cut, eos left out) and hands each step's text to
its consumers as ``RequestOutput.new_text`` with that step's
``new_token_ids``.  :class:`OutputClassifier` feeds that text to the
:class:`~orchestrator.parsers.StreamingParser` and gives each new token the
class of the parser state around the text it produced: a token touching the
``<think>`` block is ``reasoning`` (the closing marker belongs to the block
it closes), one touching a tool-call block is ``tool_call``, else ``output``.
The agent loop, ``LoomChatModel``, the chat-completions endpoint and the
evals' in-process target all classify through it, so the ledger's output
classes and OpenAI's ``reasoning_tokens`` agree.

Exact for one token per output (``AsyncLLM`` streams one per step without
speculation).  When one output brings ``n > 1`` tokens (accepted drafts, or
the sync ``LLM``'s single final output), the text is cut into ``n`` runs of
equal length and each token is classed by its run: boundary tokens may
swap class, the total is always ``n``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.parsers import ParserEvent, StreamingParser

__all__ = ["OutputClassifier", "classify"]


def classify(before: str, after: str, events: list[ParserEvent]) -> str:
    """Class of a token whose text moved the parser from state ``before`` to ``after``."""
    if "reasoning" in (before, after):
        return "reasoning"
    if "tool_call" in (before, after) or any(e.kind.startswith("tool_call") for e in events):
        return "tool_call"
    return "output"


@dataclass
class OutputClassifier:
    """Parses one reply from engine text deltas and classes each of its tokens.

    Args:
        parser: the reply's parser (its format, tool names, ``parse_tools``).
        output_class: one class for every token instead of the parser's (a side
            call such as the condense-question rewrite).
    """

    parser: StreamingParser = field(default_factory=StreamingParser)
    output_class: str | None = None
    classes: list[str] = field(default_factory=list)

    def feed(self, new_text: str, num_tokens: int) -> list[ParserEvent]:
        """Parse ``new_text`` (the text ``num_tokens`` new tokens produced); return its events."""
        n = max(num_tokens, 1)
        events: list[ParserEvent] = []
        for i in range(n):
            piece = new_text[i * len(new_text) // n:(i + 1) * len(new_text) // n]
            before = self.parser.state
            got = self.parser.feed(piece) if piece else []
            if i < num_tokens:
                self.classes.append(self.output_class or classify(before, self.parser.state, got))
            events += got
        return _merge(events)

    def finish(self) -> list[ParserEvent]:
        """Events still held back by the parser at the end of the reply."""
        return self.parser.finish()


def _merge(events: list[ParserEvent]) -> list[ParserEvent]:
    """Neighbouring reasoning / content events joined (one delta per output, not one per run)."""
    out: list[ParserEvent] = []
    for e in events:
        if out and e.kind in ("reasoning", "content") and out[-1].kind == e.kind:
            out[-1] = ParserEvent(e.kind, text=out[-1].text + e.text)
        else:
            out.append(e)
    return out
