"""Named byte terms: the typed entries a step's weights and temporaries are counted in (a role's or a term's
bytes a device), dumped as the {name: bytes} mappings of the JSON contract."""

from __future__ import annotations

from typing import Iterable, Literal, get_args

from k3plan.models.inventory import Role
from k3plan.structs import Frozen

# a weight role a device holds: a tensor role, or the absorbed-MLA copies made of kv_b_proj at load
# mla_absorbed: the absorbed-MLA copies; draft_weights / rope_tables / wo_a_bf16: what a serve command's engine holds
# with the weights beside the model's tensors (Stack.extra_weights)
EngineHeld = Literal["draft_weights", "rope_tables", "wo_a_bf16"]
HeldRole = Role | Literal["mla_absorbed"] | EngineHeld
_HELD_ROLES = frozenset((*get_args(Role), "mla_absorbed", *get_args(EngineHeld)))


Named = Frozen  # the base of the named entries and of the fit's parts (k3plan.budget.result)


class TermBytes(Named):
    """One named term of a stage's temporaries and its bytes a device."""

    name: str
    bytes: int


class RoleBytes(Named):
    """One tensor role's weight bytes a device (``mla_absorbed``: the absorbed-MLA copies the engine holds beside
    kv_b_proj, budget.weights.absorbed_copy_bytes)."""

    role: HeldRole
    bytes: int

    def __post_init__(self) -> None:
        if self.role not in _HELD_ROLES:  # a typo ("experts") is a bug, refused where it is made
            raise ValueError(f"role {self.role!r}: expected one of {', '.join(sorted(_HELD_ROLES))}")


def term_map(entries: Iterable[TermBytes | RoleBytes]) -> dict[str, int]:
    """Entries as the JSON has them: name (or role) -> bytes, in their order."""
    return {(e.name if isinstance(e, TermBytes) else e.role): e.bytes for e in entries}


# a tuple of entries, dumped as the {name: bytes} mapping of the JSON contract (a Struct holding one names
# term_map in its __dump_with__)
Terms = tuple[TermBytes, ...]
RolesBytes = tuple[RoleBytes, ...]
