"""Named byte terms: the typed entries a step's weights and temporaries are counted in (a role's or a term's
bytes a device), dumped as the {name: bytes} mappings of the JSON contract."""

from __future__ import annotations

from typing import Annotated, Iterable, Literal

from pydantic import BaseModel, ConfigDict, PlainSerializer

from k3plan.models.inventory import Role

# a weight role a device holds: a tensor role, or the absorbed-MLA copies made of kv_b_proj at load
HeldRole = Role | Literal["mla_absorbed"]


class Named(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TermBytes(Named):
    """One named term of a stage's temporaries and its bytes a device."""

    name: str
    bytes: int


class RoleBytes(Named):
    """One tensor role's weight bytes a device (``mla_absorbed``: the absorbed-MLA copies the engine holds beside
    kv_b_proj, budget.weights.absorbed_copy_bytes)."""

    role: HeldRole
    bytes: int


def term_map(entries: Iterable[TermBytes | RoleBytes]) -> dict[str, int]:
    """Entries as the JSON has them: name (or role) -> bytes, in their order."""
    return {(e.name if isinstance(e, TermBytes) else e.role): e.bytes for e in entries}


# a tuple of entries, dumped as the {name: bytes} mapping of the JSON contract
Terms = Annotated[tuple[TermBytes, ...], PlainSerializer(term_map, return_type=dict[str, int])]
RolesBytes = Annotated[tuple[RoleBytes, ...], PlainSerializer(term_map, return_type=dict[str, int])]
