"""``ContextBudget``: how many prompt tokens each part of the context may take.

The prompt limit is the model window minus the tokens reserved for the reply
(output + reasoning).  Inside it, retrieval and memory have fixed caps (hits are
added in rank order while they fit) and the history has a cap (by default:
whatever the header and the current turn leave).  Counting is done on the real
token ids the chat template produces, never estimated.

Compaction (when the history outgrows its cap) is done rarely and in one big
step, down to ``low_water`` times the cap: many small trims would move the
start of the history at every turn and throw away the whole prefix cache each
time; one big drop loses it once and then stays put for many turns.  This is
the "rare, big steps" policy (compare Letta/MemGPT's
summarise-on-overflow).  What goes first is the retention policy of
:mod:`loom.orchestrator.compaction_plan`: retrieved chunks and tool steps of turns older
than the newest ``keep_retrieval_turns`` earlier turns, the dialogue kept;
whole turns only when that is not enough.  ``prefill_after_turn`` makes the
compaction the next turn will need once a turn has finished, and prefills
the compacted prompt then (:mod:`loom.orchestrator.compaction_hooks`), so the next turn
finds it in the prefix cache; ``next_turn_tokens`` is the room that forecast
leaves for the next turn's retrieval, memories and message.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from loom.runtime.errors import InvalidRequestError

TYPICAL_MESSAGE_TOKENS = 64  # a user message with its template tokens, as the after-turn forecast assumes


@dataclass
class ContextBudget:
    """Token budget of one agent's prompts (all sizes in tokens).

    Attributes:
        max_model_len: model window; ``None`` = take the engine's.
        reserved_output: tokens reserved for the answer / tool calls (also the
            ``max_tokens`` of each call, with ``reserved_reasoning``).
        reserved_reasoning: extra tokens reserved for ``<think>`` reasoning.
        max_history_tokens: cap of the history; ``None`` = all that is left.
        max_retrieval_tokens: cap of one turn's retrieval message; a small window lowers it
            (:attr:`retrieval_cap`).
        max_memory_tokens: cap of the memory snapshot and of one turn's new hits
            (:attr:`memory_cap`).
        max_tool_result_tokens: a tool result longer than this is truncated, with a visible
            marker (:attr:`tool_result_cap`).
        low_water: after compaction the history is at most this fraction of its cap
            (0.7: with the compaction prefilled after the turn, a fuller view caches
            more per turn; 30-turn stdlib session in 4k: 86% vs 84% at 0.5, for
            10 compactions instead of 9).
        compaction: ``"drop"`` oldest turns, or ``"summarize"`` them with the model.
        summary_tokens: ``max_tokens`` of a summary.
        keep_retrieval_turns: retrieved chunks and tool steps of this many newest
            earlier turns are hidden last (older ones go first, the dialogue stays;
            the newest earlier turn's go only with whole turns); ``None``: whole
            turns only (the old policy).
        prefill_after_turn: plan the next turn's compaction and prefill the
            compacted prompt once a turn has finished (off the critical path).
        next_turn_tokens: tokens that forecast reserves for the next turn's
            inputs; ``None``: forecast from recent turns
            (``loom.orchestrator.compaction_hooks.forecast``): their retrieval and new
            memories with a margin, at most ``max_retrieval_tokens +
            max_memory_tokens`` (each only when the agent retrieves / has a
            memory), plus their longest message with a margin (64 tokens
            before any turn).

    Raises:
        InvalidRequestError: (a ``ValueError``) naming the bad field.
    """

    max_model_len: int | None = None
    reserved_output: int = 256
    reserved_reasoning: int = 0
    max_history_tokens: int | None = None
    max_retrieval_tokens: int = 1024
    max_memory_tokens: int = 256
    max_tool_result_tokens: int = 1024
    low_water: float = 0.7
    compaction: Literal["drop", "summarize"] = "drop"
    summary_tokens: int = 128
    keep_retrieval_turns: int | None = 2
    prefill_after_turn: bool = True
    next_turn_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_model_len", "max_history_tokens"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v <= 0):
                raise InvalidRequestError(f"{name}: must be a positive int or None, got {v!r}", param=name)
        for name in ("reserved_output", "max_retrieval_tokens", "max_memory_tokens",
                     "max_tool_result_tokens", "summary_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise InvalidRequestError(f"{name}: must be a positive int, got {v!r}", param=name)
        for name in ("keep_retrieval_turns", "next_turn_tokens"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise InvalidRequestError(f"{name}: must be an int >= 0 or None, got {v!r}", param=name)
        if not isinstance(self.prefill_after_turn, bool):
            raise InvalidRequestError("prefill_after_turn: must be a bool", param="prefill_after_turn")
        if not isinstance(self.reserved_reasoning, int) or self.reserved_reasoning < 0:
            raise InvalidRequestError("reserved_reasoning: must be an int >= 0", param="reserved_reasoning")
        if not 0.0 < self.low_water < 1.0:
            raise InvalidRequestError(f"low_water: must be in (0, 1), got {self.low_water!r}", param="low_water")
        if self.compaction not in ("drop", "summarize"):
            raise InvalidRequestError("compaction: must be 'drop' or 'summarize'", param="compaction")
        if self.max_model_len is not None and self.prompt_limit <= 0:
            raise InvalidRequestError("reserved_output: reserved tokens leave no room for a prompt "
                                      f"in a {self.max_model_len}-token window", param="reserved_output")

    def with_window(self, max_model_len: int) -> "ContextBudget":
        """This budget with the window filled in (when it was ``None``)."""
        return self if self.max_model_len is not None else replace(self, max_model_len=max_model_len)

    @property
    def max_tokens(self) -> int:
        """Tokens reserved for one reply (output + reasoning)."""
        return self.reserved_output + self.reserved_reasoning

    @property
    def window(self) -> int:
        """``max_model_len`` once known (tokens).

        Raises:
            InvalidRequestError: the budget has no window yet (``with_window`` sets it).
        """
        if self.max_model_len is None:
            raise InvalidRequestError("max_model_len: unknown; give it or build the budget from an engine",
                                      param="max_model_len")
        return self.max_model_len

    @property
    def prompt_limit(self) -> int:
        """Most prompt tokens: window - reserved output - reserved reasoning."""
        return self.window - self.max_tokens

    @property
    def retrieval_cap(self) -> int:
        """Tokens one turn's retrieval message may take: ``max_retrieval_tokens``, at most half the prompt
        limit (so with a 1,024-token window retrieval still leaves room for the question and history)."""
        if self.max_model_len is None:
            return self.max_retrieval_tokens
        return max(1, min(self.max_retrieval_tokens, self.prompt_limit // 2))

    @property
    def tool_result_cap(self) -> int:
        """Tokens a tool result keeps before it is cut: ``max_tool_result_tokens``, at most half the prompt
        limit (a 10 kB result in a small window is cut, not a failed turn)."""
        if self.max_model_len is None:
            return self.max_tool_result_tokens
        return max(1, min(self.max_tool_result_tokens, self.prompt_limit // 2))

    @property
    def memory_cap(self) -> int:
        """Tokens of the memory snapshot and of one turn's new memories: ``max_memory_tokens``, at most a
        quarter of the prompt limit."""
        if self.max_model_len is None:
            return self.max_memory_tokens
        return max(1, min(self.max_memory_tokens, self.prompt_limit // 4))

    def next_turn_margin(self, retrieval: bool = True, memory: bool = True) -> int:
        """Tokens the after-turn forecast reserves for the next turn's inputs (see ``next_turn_tokens``).

        ``retrieval`` / ``memory``: whether the agent adds a retrieval / memory message each turn.
        """
        if self.next_turn_tokens is not None:
            return self.next_turn_tokens
        return self.retrieval_cap * retrieval + self.memory_cap * memory + TYPICAL_MESSAGE_TOKENS

    def history_cap(self, fixed_tokens: int) -> int:
        """History cap given the tokens of everything else in the prompt."""
        room = self.prompt_limit - fixed_tokens
        return room if self.max_history_tokens is None else min(room, self.max_history_tokens)
