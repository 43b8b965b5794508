"""Check that ``loom serve``'s OpenTelemetry spans reach Arize Phoenix with the right token counts.

Sends one session turn and one chat completion to a running Loom server that exports its traces to a
running Phoenix, polls Phoenix's REST API until the spans arrive, and prints, for each span, the token
counts Phoenix holds (the ``llm.token_count.*`` attributes it stored, and the counts it parsed into its
own columns: per LLM span, and cumulated over the turn's spans) beside the ``usage`` of Loom's answers.
Exits 0 when they all agree, 1 when one differs, 2 when the spans did not arrive in time.

Start Phoenix (any recent ``arize-phoenix``; OTLP/HTTP on its web port)::

    python -m venv .venv-phoenix && .venv-phoenix/bin/pip install arize-phoenix
    PHOENIX_WORKING_DIR=$(mktemp -d) .venv-phoenix/bin/phoenix serve          # http://127.0.0.1:6006

then Loom, exporting to it::

    HF_HUB_OFFLINE=1 .venv/bin/loom serve --no-auth --port 8011 --db sqlite:////tmp/phx/loom.db \\
        --otlp-traces-endpoint http://127.0.0.1:6006/v1/traces

and run::

    .venv/bin/python scripts/phoenix_check.py --phoenix http://127.0.0.1:6006 --loom http://127.0.0.1:8011

``--api-key`` (or ``LOOM_API_KEY``) for a Loom server with keys, ``--phoenix-api-key`` (or
``PHOENIX_API_KEY``) for a Phoenix with authentication, ``--project`` when Phoenix files Loom's spans
under another project than ``default``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import httpx

FIELDS = ("prompt", "completion", "total", "cache_read", "reasoning")
ATTRS = {  # OpenInference attribute per field
    "prompt": "llm.token_count.prompt",
    "completion": "llm.token_count.completion",
    "total": "llm.token_count.total",
    "cache_read": "llm.token_count.prompt_details.cache_read",
    "reasoning": "llm.token_count.completion_details.reasoning",
}
GQL_FIELDS = ("tokenCountPrompt tokenCountCompletion tokenCountTotal tokenPromptDetails { cacheRead } "
              "cumulativeTokenCountPrompt cumulativeTokenCountCompletion cumulativeTokenCountTotal")


def loom_usage(usage: dict[str, Any]) -> dict[str, int]:
    """The counts of an OpenAI-style ``usage`` object, by field."""
    return {
        "prompt": usage.get("prompt_tokens", 0),
        "completion": usage.get("completion_tokens", 0),
        "total": usage.get("total_tokens", 0),
        "cache_read": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
        "reasoning": (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0),
    }


def send_requests(loom: httpx.Client) -> dict[str, Any]:
    """One session turn and one chat completion; their ids and usage."""
    r = loom.post("/v1/sessions", json={"system_prompt": "You answer briefly.", "tools": ["calculator"]})
    r.raise_for_status()
    session_id = r.json()["id"]
    r = loom.post(f"/v1/sessions/{session_id}/messages", json={"content": "What is 365 * 24?"})
    r.raise_for_status()
    turn = r.json()
    r = loom.post("/v1/chat/completions", json={"model": "loom", "messages": [{"role": "user", "content": "Hi"}],
                                                "max_tokens": 16})
    r.raise_for_status()
    chat = r.json()
    print(f"loom: session {session_id}: state {turn.get('state')}, answer {turn.get('answer')!r}, "
          f"{len(turn.get('tool_calls') or [])} tool call(s)")
    print(f"loom: chat completion {chat['id']}: {chat['choices'][0]['message'].get('content')!r}")
    return {"session_id": session_id, "turn_usage": turn["usage"], "chat_id": chat["id"], "chat_usage": chat["usage"]}


class Phoenix:
    def __init__(self, client: httpx.Client, project: str):
        self.client, self.project = client, project

    def spans(self, **params: Any) -> list[dict[str, Any]]:
        """The project's spans matching Phoenix's REST filters, every page."""
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            q = {**params, "limit": 1000, **({"cursor": cursor} if cursor else {})}
            r = self.client.get(f"/v1/projects/{self.project}/spans", params=q)
            if r.status_code == 404:  # the project does not exist yet: nothing arrived
                return []
            r.raise_for_status()
            body = r.json()
            out += body["data"]
            cursor = body.get("next_cursor")
            if not cursor:
                return out

    def parsed(self, span_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Phoenix's own token columns (GraphQL) for the spans with these global ids."""
        if not span_ids:
            return {}
        query = "{ " + " ".join(f'n{i}: node(id: "{sid}") {{ ... on Span {{ {GQL_FIELDS} }} }}'
                                for i, sid in enumerate(span_ids)) + " }"
        r = self.client.post("/graphql", json={"query": query})
        r.raise_for_status()
        body = r.json()
        if body.get("errors"):
            raise RuntimeError(f"Phoenix GraphQL: {body['errors']}")
        return {sid: body["data"][f"n{i}"] for i, sid in enumerate(span_ids)}


def find(phoenix: Phoenix, sent: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """(the turn's trace's spans, the chat completion's span) once both are in Phoenix, else None."""
    agents = phoenix.spans(attribute=[f"gen_ai.conversation.id:{sent['session_id']}"], span_kind=["AGENT"])
    chats = phoenix.spans(attribute=[f"gen_ai.response.id:{sent['chat_id']}"])
    if not agents or not chats:
        return None
    trace_spans = phoenix.spans(trace_id=[agents[0]["context"]["trace_id"]])
    agent_id = agents[0]["context"]["span_id"]
    if not any(s["parent_id"] == agent_id and s["span_kind"] == "LLM" for s in trace_spans):
        return None
    return trace_spans, chats[0]


def from_attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {f: span["attributes"].get(a) for f, a in ATTRS.items()}


def from_columns(p: dict[str, Any], cumulative: bool) -> dict[str, Any]:
    if cumulative:
        vals = {"prompt": p["cumulativeTokenCountPrompt"], "completion": p["cumulativeTokenCountCompletion"],
                "total": p["cumulativeTokenCountTotal"]}
    else:
        vals = {"prompt": p["tokenCountPrompt"], "completion": p["tokenCountCompletion"], "total": p["tokenCountTotal"],
                "cache_read": (p.get("tokenPromptDetails") or {}).get("cacheRead")}
    return {f: (int(v) if isinstance(v, float) and v.is_integer() else v) for f, v in vals.items()}


def compare(label: str, phoenix_vals: dict[str, Any], loom_vals: dict[str, int]) -> list[Any]:
    """A table row; its last cell says whether every field Phoenix has equals Loom's."""
    checked = [f for f in FIELDS if f in phoenix_vals]
    ok = all(phoenix_vals[f] == loom_vals[f] for f in checked)
    cells = [f"{phoenix_vals[f]}/{loom_vals[f]}" if f in phoenix_vals else "-" for f in FIELDS]
    return [label, *cells, "ok" if ok else "DIFFERS"]


def print_table(rows: list[list[Any]]) -> None:
    head = ["span: Phoenix's figures", *(f"{f} (phx/loom)" for f in FIELDS), "match"]
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, ["-" * w for w in widths], *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phoenix", default="http://127.0.0.1:6006", help="Phoenix's URL (default %(default)s)")
    ap.add_argument("--loom", default="http://127.0.0.1:8011", help="Loom's URL (default %(default)s)")
    ap.add_argument("--project", default="default", help="Phoenix project Loom's spans land in (default %(default)s)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the spans (default %(default)s)")
    ap.add_argument("--api-key", default=os.environ.get("LOOM_API_KEY"), help="Loom API key (LOOM_API_KEY)")
    ap.add_argument("--phoenix-api-key", default=os.environ.get("PHOENIX_API_KEY"),
                    help="Phoenix API key (PHOENIX_API_KEY)")
    args = ap.parse_args(argv)

    def headers(key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    with httpx.Client(base_url=args.loom, headers=headers(args.api_key), timeout=300) as loom_client, \
            httpx.Client(base_url=args.phoenix, headers=headers(args.phoenix_api_key), timeout=30) as phx_client:
        sent = send_requests(loom_client)
        phoenix = Phoenix(phx_client, args.project)
        started = time.monotonic()
        found = None
        while time.monotonic() - started < args.timeout:
            found = find(phoenix, sent)
            if found:
                break
            time.sleep(1.0)
        if not found:
            print(f"FAIL: the spans of session {sent['session_id']} and of {sent['chat_id']} did not all reach "
                  f"Phoenix's project {args.project!r} within {args.timeout:.0f} s")
            return 2
        time.sleep(2.0)  # let a straggling batch land, then read everything again
        found = find(phoenix, sent) or found
        trace_spans, chat_span = found
        print(f"phoenix: spans arrived after {time.monotonic() - started:.1f} s")

        agent = next(s for s in trace_spans if s["span_kind"] == "AGENT"
                     and s["attributes"].get("gen_ai.conversation.id") == sent["session_id"])
        calls = [s for s in trace_spans if s["parent_id"] == agent["context"]["span_id"] and s["span_kind"] == "LLM"]
        parsed = phoenix.parsed([agent["id"], chat_span["id"], *(s["id"] for s in calls)])

        print(f"\nthe turn's trace {agent['context']['trace_id']}, as Phoenix has it:")
        by_id = {s["context"]["span_id"]: s for s in trace_spans}
        for s in sorted(trace_spans, key=lambda s: s["start_time"]):
            depth, p = 0, s["parent_id"]
            while p in by_id:
                depth, p = depth + 1, by_id[p]["parent_id"]
            print(f"  {'  ' * depth}{s['name']}  [{s['span_kind']}]")
        print(f"the chat completion's span: {chat_span['name']} [{chat_span['span_kind']}], "
              f"trace {chat_span['context']['trace_id']}\n")

        turn, chat = loom_usage(sent["turn_usage"]), loom_usage(sent["chat_usage"])
        rows = [compare(f"{agent['name']}: llm.token_count.* attributes", from_attrs(agent), turn),
                compare(f"{agent['name']}: Phoenix cumulative columns", from_columns(parsed[agent["id"]], True), turn)]
        sums: dict[str, Any] = {f: 0 for f in FIELDS}
        for i, s in enumerate(calls):
            attrs = from_attrs(s)
            sums = {f: sums[f] + (attrs[f] or 0) for f in FIELDS}
            cols = from_columns(parsed[s["id"]], False)
            if len(calls) == 1:  # the turn's only call: its usage is the turn's
                rows.append(compare(f"  {s['name']}: Phoenix columns", cols, turn))
            else:  # one of several calls: Loom answers the turn's sum only; check Phoenix parsed the span's own
                rows.append(compare(f"  {s['name']} #{i + 1}: Phoenix columns (vs its attributes)", cols,
                                    {f: attrs[f] or 0 for f in FIELDS}))
        rows.append(compare(f"  sum of the turn's {len(calls)} chat span(s) attributes", sums, turn))
        rows.append(compare(f"{chat_span['name']} (chat completion): attributes", from_attrs(chat_span), chat))
        rows.append(compare(f"{chat_span['name']} (chat completion): Phoenix columns",
                            from_columns(parsed[chat_span["id"]], False), chat))
        print("Phoenix's figures / the usage in Loom's answer (the session turn's, or the chat completion's):")
        print_table(rows)
        if any(r[-1] != "ok" for r in rows):
            print("\nFAIL: Phoenix's token counts differ from Loom's usage")
            return 1
        print("\nOK: every token count Phoenix holds equals Loom's usage")
        return 0


if __name__ == "__main__":
    sys.exit(main())
