"""Token-exact prompts of a conversation with class spans (``system``, ``history``, ``user``).

Prompts follow the checkpoints' chat template (Qwen/ChatML:
``<|im_start|>{role}\\n{content}<|im_end|>\\n``, generation prompt
``<|im_start|>assistant\\n``) and grow append-only: turn N+1's token ids are
turn N's prompt, the reply's exact output ids, ``<|im_end|>\\n`` and the new
user turn, so a prefix cache can serve the whole history (the orchestrator's
rule).  The reply is never re-tokenized, which keeps that exact for any output
(a random-weight model's noise included).  ``messages`` holds the same
conversation as OpenAI chat messages for HTTP targets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loom.orchestrator.protocols import Tokenizer


@dataclass
class PromptState:
    """One conversation's growing prompt (token ids), its spans and its messages."""

    tokenizer: Tokenizer
    system: str = ""
    ids: list[int] = field(default_factory=list)
    system_end: int = 0
    messages: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.system:
            self.ids = self._enc(f"<|im_start|>system\n{self.system}<|im_end|>\n")
            self.system_end = len(self.ids)
            self.messages.append({"role": "system", "content": self.system})

    def _enc(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def user_turn(self, text: str) -> tuple[list[int], list[tuple[str, int, int]]]:
        """Prompt ids for a new user message and its ``(class, start, end)`` spans."""
        history_end = len(self.ids)
        ids = self.ids + self._enc(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")
        spans = [("system", 0, self.system_end), ("history", self.system_end, history_end),
                 ("user", history_end, len(ids))]
        self.messages.append({"role": "user", "content": text})
        self._pending = ids
        return ids, [s for s in spans if s[2] > s[1]]

    def add_reply(self, output_ids: list[int], text: str) -> None:
        """Append the reply (exact ids) so the next turn extends this prompt."""
        end = self._enc("<|im_end|>\n")
        tail = list(output_ids)
        if tail and tail[-1] == end[0]:
            tail = tail[:-1]
        self.ids = self._pending + tail + end
        self.messages.append({"role": "assistant", "content": text})
