"""Output token classes (``reasoning`` / ``tool_call`` / ``output``) from the engine's own text.

The engine detokenizes once (``loom.runtime.detokenizer``: whole UTF-8
characters, stop strings cut, eos left out) and hands each step's text to
its consumers as ``RequestOutput.new_text`` with that step's
``new_token_ids``.  :class:`OutputClassifier` feeds that text to the
:class:`~loom.orchestrator.parsers.StreamingParser` and gives each new token the
class of the parser state around the text it produced: a token touching the
``<think>`` block is ``reasoning`` (the closing marker belongs to the block
it closes), one touching a tool-call block is ``tool_call``, else ``output``.
The agent loop, ``LoomChatModel``, the chat-completions endpoint and the
evals' in-process target all classify through it, so the ledger's output
classes and OpenAI's ``reasoning_tokens`` agree.

Exact for one token per output (``AsyncLLM`` streams one per step without
speculation).  When one output brings ``n > 1`` tokens (accepted drafts, or
the sync ``LLM``'s single final output), the text is cut into ``n`` runs of
equal length and each token is classed by its run: tokens at a block
boundary may swap class; the count is always ``n``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loom.orchestrator.parsers import ParserEvent, StreamingParser

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
        classes: the list the classes are appended to (one per token fed).
    """

    parser: StreamingParser = field(default_factory=StreamingParser)
    output_class: str | None = None
    classes: list[str] = field(default_factory=list)
    _held: int = 0  # tokens whose text the parser still holds back (a marker may be starting)
    _held_state: str = "content"  # parser state before the first of them

    def feed(self, new_text: str, num_tokens: int) -> list[ParserEvent]:
        """Parse ``new_text`` (the text ``num_tokens`` new tokens produced); return its events.

        A token whose text the parser holds back (it may start a marker, "<thi")
        is classed with the text that settles it, so a marker split over
        tokens belongs to its block.
        """
        n = max(num_tokens, 1)
        events: list[ParserEvent] = []
        for i in range(n):
            piece = new_text[i * len(new_text) // n:(i + 1) * len(new_text) // n]
            count = 1 if i < num_tokens else 0
            before = self.parser.state
            got = self.parser.feed(piece) if piece else []
            events += got
            if piece and not got and self.parser.state == before:
                if not self._held:
                    self._held_state = before
                self._held += count
                continue
            self._settle(self._held_state if self._held else before, got, count)
        return _merge(events)

    def finish(self, cut_off: bool = False) -> list[ParserEvent]:
        """Events still held back by the parser at the end of the reply (held tokens classed);
        ``cut_off``: the reply ended at ``max_tokens`` (``StreamingToolParser.finish``)."""
        events = self.parser.finish(cut_off)
        self._settle(self._held_state if self._held else self.parser.state, events, 0)
        return events

    def _settle(self, before: str, events: list[ParserEvent], count: int) -> None:
        cls = self.output_class or classify(before, self.parser.state, events)
        self.classes += [cls] * (self._held + count)
        self._held = 0


def _merge(events: list[ParserEvent]) -> list[ParserEvent]:
    """Neighbouring reasoning / content events joined (one delta per output, not one per run)."""
    out: list[ParserEvent] = []
    for e in events:
        if out and e.kind in ("reasoning", "content") and out[-1].kind == e.kind:
            out[-1] = ParserEvent(e.kind, text=out[-1].text + e.text)
        else:
            out.append(e)
    return out
