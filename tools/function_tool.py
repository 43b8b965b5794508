"""``@tool``: a typed Python function (sync or async) as a :class:`~loom.tools.base.Tool`.

The parameter schema and its validation come from one pydantic model built
from the signature (:mod:`loom.tools.schema`); the description from the docstring.
Arguments are validated before the function runs: invalid ones raise
:class:`~loom.tools.base.ToolArgumentsError` naming the field, and the function is
not called.

Sync functions run on a fresh daemon thread per call, so a slow or blocking
tool never stalls the event loop (the engine's output streams and the other
tool calls of the same step keep flowing).  This is ``asyncio.to_thread``
without the shared default executor: a tool that hangs past its timeout keeps
only its own thread, which neither occupies a pool worker nor blocks
``asyncio.run()``/interpreter shutdown from returning.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar, overload

from pydantic import ValidationError

from loom.json_types import JSONObject
from loom.tools.base import ToolArgumentsError, openai_schema, to_content
from loom.tools.schema import args_model_from_signature, clean_schema, describe_function

__all__ = ["FunctionTool", "format_validation_error", "run_sync", "tool"]

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's function-name rule
T = TypeVar("T")


class FunctionTool:
    """A Python function with a derived JSON schema; implements :class:`~loom.tools.base.Tool`.

    Attributes:
        name: tool name (``^[A-Za-z0-9_-]{1,64}$``).
        description: what the model reads to decide when to call it.
        parameters: JSON schema (type ``object``) of the keyword arguments,
            canonical key order.
        args_model: the pydantic model that validates the arguments.
        timeout_s: this tool's own timeout in seconds (``None``: the registry's).
        fn: the wrapped function, still callable directly (``tool(...)``).

    Raises:
        ValueError: invalid ``name`` or ``timeout_s``.
        TypeError: ``*args``/``**kwargs`` or unresolvable type hints.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        requires_approval: bool = False,
    ) -> None:
        self.fn = fn
        self.requires_approval = bool(requires_approval)
        self.name: str = name or str(getattr(fn, "__name__", ""))
        if not _NAME_RE.match(self.name):
            raise ValueError(f"name: tool name {self.name!r} must match {_NAME_RE.pattern}")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s: must be > 0 seconds, got {timeout_s!r}")
        self.timeout_s = timeout_s
        doc_description, param_docs = describe_function(fn)
        self.description: str = description if description is not None else doc_description
        self.args_model, self._field_names = args_model_from_signature(fn, param_docs, self.name)
        self.parameters = clean_schema(self.args_model.model_json_schema())
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)
        )
        self._positional_only = {
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind is p.POSITIONAL_ONLY
        }

    def __repr__(self) -> str:
        return f"FunctionTool(name={self.name!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly (no validation, no thread)."""
        return self.fn(*args, **kwargs)

    def openai_schema(self) -> JSONObject:
        """``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return openai_schema(self.name, self.description, self.parameters)

    def validate(self, arguments: JSONObject) -> JSONObject:
        """Validate (and coerce) ``arguments``; return them keyed by parameter name.

        Raises:
            ToolArgumentsError: naming the first offending field.
        """
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(
                f"arguments must be a JSON object, got {type(arguments).__name__}"
            )
        try:
            model = self.args_model.model_validate(arguments)
        except ValidationError as exc:
            message, param = format_validation_error(exc)
            raise ToolArgumentsError(message, param=param) from None
        return {pname: getattr(model, field) for field, pname in self._field_names.items()}

    async def ainvoke(self, arguments: JSONObject) -> str:
        """Validate ``arguments``, run the function, return its result as text.

        Raises:
            ToolArgumentsError: invalid arguments (the function is not called).
            Exception: whatever the function raises.
        """
        values = self.validate(arguments)
        args = [values.pop(p) for p in list(values) if p in self._positional_only]
        if self._is_async:
            result = await self.fn(*args, **values)
        else:
            result = await run_sync(self.fn, *args, _thread_name=f"loom-tool-{self.name}", **values)
        return to_content(result)


def format_validation_error(exc: ValidationError) -> tuple[str, str | None]:
    """A one-line message naming every bad field, and the first field's path."""
    parts = []
    first: str | None = None
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"])
        first = first or loc or None
        got = "" if err["type"] == "missing" else f" (got {err['input']!r:.80})"
        parts.append(f"field '{loc}': {err['msg']}{got}" if loc else f"{err['msg']}{got}")
    return "; ".join(parts), first


async def run_sync(
    fn: Callable[..., T], /, *args: Any, _thread_name: str = "loom-tool", **kwargs: Any
) -> T:
    """Run a blocking ``fn(*args, **kwargs)`` on its own daemon thread and await it.

    Context variables are copied like ``asyncio.to_thread`` does.  If the
    awaiting task is cancelled (e.g. by ``asyncio.wait_for``), the thread runs
    on to completion in the background and its result is discarded.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    ctx = contextvars.copy_context()

    def deliver(setter: Callable[[Any], None], value: Any) -> None:
        if not future.done():
            setter(value)

    def target() -> None:
        try:
            result = ctx.run(fn, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            if isinstance(exc, StopIteration):  # a Future refuses StopIteration
                exc = RuntimeError("StopIteration" + (f": {exc}" if str(exc) else ""))
            outcome: tuple[Callable[[Any], None], Any] = (future.set_exception, exc)
        else:
            outcome = (future.set_result, result)
        try:
            loop.call_soon_threadsafe(deliver, *outcome)
        except RuntimeError:  # the loop closed while the tool was still running
            pass

    threading.Thread(target=target, name=_thread_name, daemon=True).start()
    return await future


@overload
def tool(
    fn: Callable[..., Any], /, *, name: str | None = None, description: str | None = None,
    timeout_s: float | None = None, requires_approval: bool = False,
) -> FunctionTool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, timeout_s: float | None = None,
    requires_approval: bool = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    requires_approval: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a typed function into a :class:`FunctionTool`.

    Use bare (``@tool``) or with options (``@tool(name=..., description=...,
    timeout_s=..., requires_approval=True)``; an agent pauses a turn for a human's
    decision before running a tool that requires approval: ``loom.orchestrator.approval``).  The name defaults to the function's ``__name__``; the
    description to its docstring (summary and body, without ``Args:``).

    Example::

        @tool
        async def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
            '''Current weather for a city.

            Args:
                city: city name, e.g. "Paris".
                unit: temperature unit.
            '''
    """

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, timeout_s=timeout_s,
                            requires_approval=requires_approval)

    return wrap(fn) if fn is not None else wrap
