"""A tool the client runs: declared by its OpenAI function schema, executed outside Loom.

In a REST session (``SessionCreate.client_tools``) the model may call such a
tool like any other; the call always pauses the turn (``requires_approval``)
and the client answers it with ``{"decision": "result", "output": ...}`` on
``POST /v1/sessions/{id}/approvals`` (``loom.orchestrator.approval``).  Running it
in Loom is impossible by construction: an ``approve`` of such a call gives the
model an error result saying the client must supply the output.
"""

from __future__ import annotations

from loom.json_types import JSONObject
from loom.tools.base import ToolError, openai_schema
from loom.tools.schema import clean_schema


class ClientTool:
    """A :class:`~loom.tools.base.Tool` whose calls the client executes.

    Args:
        name / description / parameters: the OpenAI function definition (``parameters``: a JSON
            schema of type object; cleaned and canonical like every tool's, so the prefix is stable).
    """

    requires_approval = True
    executor = "client"

    def __init__(self, name: str, description: str = "", parameters: JSONObject | None = None) -> None:
        self.name = name
        self.description = (description or "").strip()
        schema = clean_schema(dict(parameters or {"type": "object", "properties": {}}))
        schema.setdefault("type", "object")
        self.parameters = schema
        self.timeout_s: float | None = None

    def openai_schema(self) -> JSONObject:
        """``{"type": "function", "function": {...}}``, canonical."""
        return openai_schema(self.name, self.description, self.parameters)

    async def ainvoke(self, arguments: JSONObject) -> str:
        """Never runs here.

        Raises:
            ToolError: always: the client must post the call's output.
        """
        raise ToolError(f"{self.name} runs on the client: its output must come from the client "
                        "(decision 'result'), not from an approval")
