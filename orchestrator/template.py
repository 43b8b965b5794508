"""Incremental rendering of chat messages into exact token ids, through the
model's own chat template.

The prompt is never re-rendered from text.  Each new message (or group of
messages appended together) is rendered by ``tokenizer.apply_chat_template``
as the *suffix* that appending it adds to the rendered conversation:
``render(prev + new)[len(render(prev)):]``; the suffix is then tokenized on
its own.  Chat templates in the ChatML family start every message with the
special ``<|im_start|>`` token, so tokenizing the pieces separately gives the
same ids as tokenizing the whole (the template-stability test checks it).

Prefix stability: the diff needs ``render(prev + new)`` to start with
``render(prev)``.  Loom's templates are prefix-stable by construction.  A
template that is not (Qwen3's official one strips earlier turns' reasoning;
the Hermes/Qwen tool template closes a run of ``tool`` messages only after the
last one) is handled in two ways: messages that a template renders together
(consecutive ``tool`` results) are always appended as one group, and when the
prefix still does not match, the new messages are rendered after a minimal
anchor conversation ``[system, user]`` instead and a warning is logged once.
Either way the prompt is the stored ids of everything before plus the new
suffix, so turn N+1's prompt always begins with turn N's prompt plus reply;
for an unstable template that prompt differs from what the template would
render for the whole conversation (e.g. old reasoning is kept as first shown).

:func:`render_chat` is the one place a conversation meets the chat template
(tool schemas injected the model's way by its
:class:`~loom.orchestrator.formats.ToolCallFormat`); the agent's renderer and
``/v1/chat/completions`` (:func:`prompt_ids`) both go through it.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from loom.json_types import JSONObject
from loom.runtime.errors import InvalidRequestError

from loom.orchestrator.formats import ToolCallFormat
from loom.orchestrator.protocols import Tokenizer, decode_text

logger = logging.getLogger(__name__)

_ANCHOR = [{"role": "system", "content": ""}, {"role": "user", "content": "."}]


def render_chat(tokenizer: Tokenizer, fmt: ToolCallFormat, messages: Sequence[JSONObject],
                tools: list[JSONObject] | None, add_generation_prompt: bool = False,
                template_kwargs: JSONObject | None = None) -> str:
    """The chat template's text for ``messages`` and ``tools`` in the model's format.

    ``fmt.prepare`` puts them in the shape the template takes (``tools=`` for a
    template that renders tools; the schemas in the system message and calls
    as text for one that cannot, such as SmolLM2's); nothing is tokenized.
    ``template_kwargs`` are extra variables for the template (vLLM's
    ``chat_template_kwargs``, e.g. ``{"enable_thinking": False}``).
    """
    msgs, template_tools = fmt.prepare(list(messages), tools)
    schemas: list[dict[Any, Any] | Callable[..., Any]] | None = None if template_tools is None else list(template_tools)
    text = tokenizer.apply_chat_template(msgs, tools=schemas, tokenize=False,
                                         add_generation_prompt=add_generation_prompt, **(template_kwargs or {}))
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not text")
    return text


def prompt_ids(tokenizer: Tokenizer, fmt: ToolCallFormat, messages: Sequence[JSONObject],
               tools: list[JSONObject] | None, suffix: str = "",
               template_kwargs: JSONObject | None = None,
               encode: Callable[[str], list[int]] | None = None,
               add_generation_prompt: bool = True) -> list[int]:
    """Prompt token ids of a whole conversation: the template with a generation prompt
    (unless ``add_generation_prompt=False``), plus ``suffix``.

    Tokenized without adding special tokens, so the ids are exactly what the
    template spells; ``encode`` replaces that tokenization (e.g.
    :meth:`loom.orchestrator.reuse.GeneratedIds.encode`, which keeps the ids the
    model generated for replies a stateless client resent).
    ``template_kwargs``: see :func:`render_chat`.

    Raises:
        InvalidRequestError: the template rejects the conversation (its own
            message, e.g. "Conversation roles must alternate"; never the template source).
    """
    try:
        text = render_chat(tokenizer, fmt, messages, tools, add_generation_prompt=add_generation_prompt,
                           template_kwargs=template_kwargs)
    except Exception as exc:  # jinja TemplateError / raise_exception in the template
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise InvalidRequestError(f"the model's chat template cannot render these messages: {reason}",
                                  param="messages") from exc
    if encode is not None:
        return list(encode(text + suffix))
    return list(tokenizer.encode(text + suffix, add_special_tokens=False))


def common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix of two strings (characters)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class TemplateRenderer:
    """Renders messages with a HF tokenizer's chat template into token ids.

    Args:
        tokenizer: HF fast tokenizer with ``chat_template`` (needs offsets).
        tools: OpenAI-style tool dicts passed to the template (sorted by the
            caller for a stable prefix), or ``None``.
        fmt: the model's :class:`~loom.orchestrator.formats.ToolCallFormat`
            (detected from the tokenizer when ``None``); it decides how tools,
            tool calls and tool results reach the template.

    Raises:
        ValueError: the tokenizer has no chat template.
    """

    def __init__(self, tokenizer: Tokenizer, tools: list[JSONObject] | None = None,
                 fmt: ToolCallFormat | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("tokenizer: has no chat_template; Loom renders prompts through it")
        from loom.orchestrator.formats import detect_format

        self.tokenizer = tokenizer
        self.tools = tools or None
        self.fmt = fmt if fmt is not None else detect_format(tokenizer)
        # the token that closes a message in the template (ChatML's <|im_end|>); the engine's
        # stop set is its own (LLMEngine.eos_token_ids), this is only how a stored turn ends
        self.end_of_turn = tokenizer.eos_token or "<|im_end|>"
        end_id = tokenizer.convert_tokens_to_ids(self.end_of_turn)
        assert isinstance(end_id, int)  # one token in, one id out
        self.end_of_turn_id = end_id
        self.prefix_stable = True
        self._trailer: list[int] | None = None

    # -- text --------------------------------------------------------------
    def render(self, messages: Sequence[JSONObject], add_generation_prompt: bool = False,
               tools: Any = "default") -> str:
        """The template's text for ``messages`` (no tokenization)."""
        tools = self.tools if tools == "default" else tools
        if not messages:
            return self._empty(tools) + (self._gen_text() if add_generation_prompt else "")
        return render_chat(self.tokenizer, self.fmt, messages, tools, add_generation_prompt)

    def _empty(self, tools: Any) -> str:
        """What the template renders before the first message when there is none (the tool block)."""
        if not tools:
            return ""
        probe = [_ANCHOR[1]]
        full = self.render(probe, tools=tools)
        bare = self.render(probe, tools=None)
        return full[: len(full) - len(bare)] if full.endswith(bare) else ""

    def _gen_text(self) -> str:
        probe = [_ANCHOR[1]]
        full = self.render(probe, add_generation_prompt=True, tools=None)
        return full[len(self.render(probe, tools=None)):]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens included."""
        return decode_text(self.tokenizer, ids)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special-token strings map to their ids; no BOS added)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []

    def encode_spans(self, text: str, bounds: Sequence[int]) -> list[list[int]]:
        """Tokenize ``text`` once and cut the ids at character offsets ``bounds``.

        A token belongs to the piece holding its first character, so the pieces
        concatenate to exactly ``encode(text)``.

        Args:
            bounds: increasing character offsets ``0 < b1 < b2 ... < len(text)``.

        Returns:
            ``len(bounds) + 1`` id lists.
        """
        if not text:
            return [[] for _ in range(len(bounds) + 1)]
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        pieces: list[list[int]] = [[] for _ in range(len(bounds) + 1)]
        k = 0
        for tid, (start, _end) in zip(enc["input_ids"], enc["offset_mapping"]):
            while k < len(bounds) and start >= bounds[k]:
                k += 1
            pieces[k].append(tid)
        return pieces

    # -- pieces of the prompt ----------------------------------------------
    def header(self, system_prompt: str | None) -> list[tuple[str, list[int]]]:
        """The system turn as ordered ``(class, ids)`` pieces: ``system`` / ``tools`` / ``system``.

        The tool block's character range is found by rendering the system turn
        with and without tools; tokens starting before it (and the closing
        ``<|im_end|>\\n``) are ``system``, the rest ``tools``.  With
        ``system_prompt=None`` there is no system message: whatever the
        template renders for the tools alone is ``tools``.
        """
        if system_prompt is None:
            return [("tools", self.encode(self._empty(self.tools)))]
        msgs = [{"role": "system", "content": system_prompt}]
        with_tools = self.render(msgs)
        if not self.tools:
            return [("system", self.encode(with_tools))]
        plain = self.render(msgs, tools=None)
        start = common_prefix_len(plain, with_tools)
        tail = common_prefix_len(plain[start:][::-1], with_tools[start:][::-1])
        end = len(with_tools) - tail
        first, tools_ids, last = self.encode_spans(with_tools, [start, end])
        return [("system", first), ("tools", tools_ids), ("system", last)]

    def append(self, prev: Sequence[JSONObject], new: Sequence[JSONObject]) -> list[list[int]]:
        """Ids that appending ``new`` to ``prev`` adds, one list per new message.

        ``prev`` starts with the system message.  Message boundaries inside the
        group are where the incremental renderings of the group diverge; a run
        of messages the template renders jointly (``tool`` results) may end up
        with all its closing tokens on the last message, which is fine since
        such a group shares one class.
        """
        base = self.render(prev)
        full = self.render(list(prev) + list(new))
        if not full.startswith(base):
            self._warn_unstable()
            prev = _ANCHOR if not prev or prev[0].get("role") != "system" else [prev[0], _ANCHOR[1]]
            base, full = self.render(prev), self.render(list(prev) + list(new))
        bounds: list[int] = []
        for i in range(1, len(new)):
            partial = self.render(list(prev) + list(new[:i]))
            cut = common_prefix_len(partial, full) - len(base)
            if bounds and cut <= bounds[-1]:
                cut = bounds[-1]
            bounds.append(max(cut, 0))
        suffix = full[len(base):]
        return self.encode_spans(suffix, bounds)

    def generation_prompt(self, messages: Sequence[JSONObject]) -> list[int]:
        """Ids the template adds for ``add_generation_prompt=True`` (``<|im_start|>assistant\\n``)."""
        base = self.render(messages)
        full = self.render(messages, add_generation_prompt=True)
        if not full.startswith(base):
            self._warn_unstable()
            return self.encode(self._gen_text())
        return self.encode(full[len(base):])

    def trailer(self) -> list[int]:
        """Ids the template puts after an assistant turn's ``<|im_end|>`` (``"\\n"``)."""
        if self._trailer is None:
            text = self.render(_ANCHOR + [{"role": "assistant", "content": "."}], tools=None)
            pos = text.rfind(self.end_of_turn)
            self._trailer = self.encode(text[pos + len(self.end_of_turn):]) if pos >= 0 else []
        return self._trailer

    def _warn_unstable(self) -> None:
        if self.prefix_stable:
            logger.warning("chat template is not prefix-stable; new messages are rendered after an "
                           "anchor conversation and earlier turns keep the tokens they were first shown with")
        self.prefix_stable = False

