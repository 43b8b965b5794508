"""Pydantic models whose JSON schemas use ``$defs`` and ``$ref`` (one recursive), as users' tool schemas do;
bounded (no extra keys, short fields) so even random logits finish a call under their grammar in a few hundred
tokens.  Shared by the grammar tests and the REST forced-call test."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Address(Strict):
    city: str = Field(max_length=6)
    zip: str = Field(pattern="^[0-9]{5}$")


class Customer(Strict):
    name: str = Field(max_length=6)
    home: Address
    others: list[Address] = Field(max_length=2)


class Node(Strict):
    label: str = Field(max_length=6)
    children: list[Node] = Field(max_length=1)


Node.model_rebuild()
