"""Human approval of tool calls: a turn pauses before a call that needs it and resumes on a decision.

As LangGraph's ``interrupt`` and Letta's ``requires_approval``: a tool made with
``@tool(requires_approval=True)`` (or named in ``Agent(approval=[...])``) is
never run on the model's word alone.  When a reply calls one, the turn stores
the reply (its exact token ids, as always) and an ``approval`` record of all the
reply's calls, ends with ``final_state="awaiting_approval"`` and
``RunResult.pending``, and yields an ``ApprovalRequiredEvent``.  Nothing else
of the reply runs yet: the reply's calls are decided together, so its results
are stored as one group and the prompt never shows a call without its result.

``Agent.resume(session, decisions)`` takes one decision per pending call id:

* ``"approve"``: run the call as the model wrote it;
* ``{"decision": "edit", "arguments": {...}}``: run it with these arguments;
* ``{"decision": "reject", "reason": "..."}``: do not run it; the model sees an
  error result ``The user rejected this call: <reason>``;
* ``{"decision": "result", "output": "..."}``: the caller ran it (a client-side
  tool); the output is the result.

A call that needs no approval is approved by default.  The decisions are stored
(an ``approval_decision`` record) with the results, and the turn's loop goes on
from the next step: its prompt extends the stored one, so the prefix cache
serves it.  Both records live in the session log, so a paused turn survives the
process (``SQLSession``) and any agent over the same session can resume it.
Neither record is a message: :func:`loom.orchestrator.items.is_message` leaves them
out of every prompt.
"""

from __future__ import annotations

import json
from typing import Literal

from loom.orchestrator.items import Decision, Item, PendingCall
from loom.runtime.errors import InvalidRequestError

APPROVAL: Literal["approval"] = "approval"
DECISION: Literal["approval_decision"] = "approval_decision"
_KINDS = ("approve", "edit", "reject", "result")

__all__ = ["APPROVAL", "DECISION", "approval_item", "check_decisions", "pending_approval"]


def approval_item(turn: int, step: int, calls: list[PendingCall], required: list[str]) -> Item:
    """The record of a paused reply: its calls (``id``, ``name``, ``arguments``) and which need approval."""
    return {"kind": APPROVAL, "turn": turn, "step": step, "calls": calls, "required": required}


def pending_approval(items: list[Item]) -> Item | None:
    """The session's undecided ``approval`` record, or ``None``."""
    for it in reversed(items):
        if it.get("kind") == DECISION:
            return None
        if it.get("kind") == APPROVAL:
            return it
    return None


def check_decisions(pending: Item, decisions: object) -> dict[str, Decision]:
    """Normalise ``decisions`` to ``{call id: {"decision", "arguments"?, "reason"?, "output"?}}``.

    ``decisions``: a mapping ``call id -> "approve" | "reject" | {...}`` or a list of
    ``{"tool_call_id", "decision", ...}``. Calls that need no approval default to approve.

    Raises:
        InvalidRequestError: an unknown call id, an unknown decision, edit arguments that
            are not an object, or a call that needs approval left undecided (naming ``decisions``).
    """
    if isinstance(decisions, list):
        try:
            decisions = {d["tool_call_id"]: d for d in decisions}
        except (TypeError, KeyError):
            raise InvalidRequestError("decisions: each entry needs a tool_call_id", param="decisions") from None
    if not isinstance(decisions, dict):
        raise InvalidRequestError("decisions: expected a mapping of tool call id to decision", param="decisions")
    ids = [c["id"] for c in pending["calls"]]
    unknown = [k for k in decisions if k not in ids]
    if unknown:
        raise InvalidRequestError(f"decisions: no pending tool call {unknown[0]!r}; pending: {ids}",
                                  param="decisions")
    out: dict[str, Decision] = {}
    for cid in ids:
        d = decisions.get(cid)
        if d is None:
            if cid in pending.get("required", []):
                raise InvalidRequestError(f"decisions: tool call {cid!r} needs a decision (approve, edit or reject)",
                                          param="decisions")
            d = "approve"
        d = {"decision": d} if isinstance(d, str) else dict(d)
        kind = d.get("decision")
        if kind not in _KINDS:
            raise InvalidRequestError(f"decisions: {kind!r} for {cid!r} is not one of {list(_KINDS)}",
                                      param="decisions")
        if kind == "edit":
            args = d.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    args = None
            if not isinstance(args, dict):
                raise InvalidRequestError(f"decisions: edit of {cid!r} needs arguments as a JSON object",
                                          param="decisions")
            d["arguments"] = args
        if kind == "result" and not isinstance(d.get("output"), str):
            raise InvalidRequestError(f"decisions: result of {cid!r} needs an output string", param="decisions")
        decision: Decision = {"decision": kind}
        if "arguments" in d:
            decision["arguments"] = d["arguments"]
        if "reason" in d:
            decision["reason"] = d["reason"]
        if "output" in d:
            decision["output"] = d["output"]
        out[cid] = decision
    return out
