"""Models of ``POST /v1/sessions/{id}/fork``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loom.api.schemas.chat import integral
from loom.api.schemas.sessions import SessionOut


class ForkCreate(BaseModel):
    """Where to fork: after a turn, or after a number of stored items (neither: the whole session)."""

    # strict: `"turn": false` or `"turn": "2"` is a 400, as the documented type says
    model_config = ConfigDict(extra="forbid", strict=True)

    turn: int | None = Field(default=None, ge=0, description="Fork after this turn (1-based; 0 keeps only the "
                             "memory snapshot): the fork holds every item of turns 0..turn.")
    at: int | None = Field(default=None, ge=0, description="Fork after this many stored items of the agent's "
                           "log (a point inside a tool step, between a call and its results, is refused).")

    _integral = field_validator("turn", "at", mode="before")(integral)


class SessionFork(SessionOut):
    """The new session, with where it came from."""

    parent_id: str = Field(description="The session it was forked from (left untouched).")
    num_items: int = Field(description="Items of the parent's log the fork holds (its prefix is the "
                           "parent's: the prefix cache serves it).")
