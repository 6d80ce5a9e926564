"""Serving stacks: what a runtime does with the weights, the cache and the memory.

A stack is a YAML file (bundled in ``k3plan/sharding/stacks/`` or a user path) fixing the runtime
format of each weight role, the KV-cache dtype and layout, the KDA state dtypes, the sharding
rules, paging, the engine's memory reserve and the expert collective pattern.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from k3plan.errors import K3PlanError
from k3plan.resources import data_dir
from k3plan.specfile import describe, read_yaml_mapping

STACK_DIR = data_dir("sharding/stacks")
DEFAULT_STACK = "vllm-tpu"
KV_DTYPES = ("bf16", "fp8", "fp8_ds_mla", "fp32")


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KVCache(_F):
    dtype: Literal["bf16", "fp8", "fp8_ds_mla", "fp32"]
    replicate_across_tp: bool  # MLA latent is shared by all heads: every TP rank holds it
    split_across_dp: bool = True  # sequences (and their KV) split across DP groups
    source: str


class State(_F):
    recurrent_dtype: Literal["f32", "bf16"]
    conv_dtype: Literal["f32", "bf16"]
    shard_by_heads: bool = True
    source: str


class Paging(_F):
    kind: Literal["hybrid", "separate", "none"]
    align_tokens: int = Field(64, ge=1)
    source: str


class Reserve(_F):
    fraction_of_usable_hbm: float = Field(ge=0.0, lt=1.0)
    source: str


class Sharding(_F):
    rules: dict[str, Optional[str]]
    role_overrides: dict[str, dict[str, Optional[str]]] = {}
    source: str


class Collectives(_F):
    experts: Literal["all_to_all", "all_reduce"]
    dispatch_dtype: Literal["fp8", "bf16", "f32"] = "bf16"  # all-to-all payload (dispatch and combine)
    source: str


class DefaultParallel(_F):
    tp: Union[int, Literal["all"]] = "all"
    dp: Union[int, Literal["all"]] = 1


class Stack(_F):
    name: str
    description: str
    platform: Literal["tpu", "gpu", "any"] = "any"
    runtime_formats: dict[str, str]  # role (or "default") -> storage format or "checkpoint"
    runtime_formats_source: str
    activation_dtype: Literal["bf16", "f32"] = "bf16"
    kv_cache: KVCache
    state: State
    paging: Paging
    reserve: Reserve
    sharding: Sharding
    collectives: Collectives
    default_parallel: DefaultParallel = DefaultParallel()

    def runtime_format(self, role: str, checkpoint_fmt: str) -> str:
        fmt = self.runtime_formats.get(role, self.runtime_formats.get("default", "checkpoint"))
        return checkpoint_fmt if fmt == "checkpoint" else fmt

    def with_kv_dtype(self, kv_dtype: str | None) -> "Stack":
        if kv_dtype is None:
            return self
        if kv_dtype not in KV_DTYPES:
            raise K3PlanError(f"--kv-dtype {kv_dtype!r}: expected one of {', '.join(KV_DTYPES)}")
        return self.model_copy(update={"kv_cache": self.kv_cache.model_copy(update={"dtype": kv_dtype})})


def list_stacks() -> list[str]:
    return sorted(p.stem for p in STACK_DIR.glob("*.yaml"))


@lru_cache(maxsize=32)
def load_stack(ref: str = DEFAULT_STACK) -> Stack:
    path = STACK_DIR / f"{ref}.yaml"
    if not path.is_file():
        path = Path(ref).expanduser()
        if not (path.suffix in (".yaml", ".yml") and path.is_file()):
            raise K3PlanError(f"unknown stack {ref!r}; known: {', '.join(list_stacks())} (or a stack YAML path)")
    data = read_yaml_mapping(str(path), path)
    try:
        return Stack(**data)
    except ValidationError as err:
        raise K3PlanError(f"{path}: {describe(err)}") from None
