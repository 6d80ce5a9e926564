"""Engine profiles: what an engine's own profile of a configuration says about one stage's device time
(issue 38).

A serving benchmark measures TPOT, which is device time and the host's time between steps together. Where an
engine's code or docs publish a profile figure -- named ops' share of a stage's device time and their measured
rate -- the stage's device time follows: the named ops' seconds at the measured rate, divided by their share.
That splits the gap between the model and the benchmark into device time and host time, each with its source.

Each file in ``k3plan/evidence/profiles/`` (package data) is one such figure, transcribed with its quote. The
ops' seconds are the model's own ops (by name) read at the profile's rate: their bytes are the step description's
(the ceiling at the HBM peak), never typed in. A profile speaks for a configuration as a serving benchmark does
(model, hardware, topology, split and the stack its engine runs); which serving flags the profile ran with is
said in ``config_published``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from k3plan.evidence.benchmarks import Split, speaks_for
from k3plan.specfile import Spec, convert, read_yaml_mapping

FOLDER = Path(__file__).parent / "profiles"

Share = Annotated[float, msgspec.Meta(gt=0, le=1)]
Rate = Annotated[float, msgspec.Meta(gt=0)]


class ProfileSource(Spec):
    repo: str
    file: str
    symbol: str
    commit: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{40}$")]
    quote: str  # the words the figures are transcribed from


class EngineProfile(Spec):
    name: str
    model: str
    engine: str  # the stack its engine runs (``torchtpu-vllm``)
    hardware: str
    topology: str
    split: Split
    stage: Literal["decode"]
    ops: Annotated[tuple[str, ...], msgspec.Meta(min_length=1)]  # the step description's op names it speaks of
    share_of_device_time: Share  # the ops' share of the stage's device time
    op_bytes_per_s: Rate  # the ops' measured rate, a device (each is a weight read at decode)
    config_published: bool  # whether the serving flags the profile ran with are published
    source: ProfileSource
    path: str = ""  # the file, set by the loader

    @property
    def label(self) -> str:
        s = self.source
        return f"{self.name} ({s.repo} {s.file} {s.symbol} @{s.commit[:8]})"


def load_profile(path: Path) -> EngineProfile:
    label = f"engine profile {path}"
    raw = read_yaml_mapping(label, path)
    return convert(EngineProfile, {**raw, "path": f"k3plan/evidence/profiles/{path.name}"}, label)


@lru_cache(maxsize=4)
def load_profiles(folder: Path = FOLDER) -> tuple[EngineProfile, ...]:
    return tuple(load_profile(p) for p in sorted(folder.glob("*.yaml")))


def matching_profiles(
    *,
    model: str,
    hardware: str,
    topology: str,
    tp: int,
    dp: int,
    ep: int,
    stack: str,
    stage: str,
    profiles: tuple[EngineProfile, ...] | None = None,
) -> tuple[EngineProfile, ...]:
    ps = load_profiles() if profiles is None else profiles
    at = (model, hardware, topology, tp, dp, ep, stack)
    return tuple(p for p in ps if p.stage == stage and speaks_for(p, p.engine, *at))


def implied_device_s(profile: EngineProfile, op_ceilings: dict[str, float], *, hbm_bytes_per_s: float) -> float | None:
    """The stage's device time the profile implies: its ops' seconds at its measured rate (each op's bytes =
    its ceiling seconds x the HBM peak: a weight read, memory-bound at decode), divided by their share. None
    when the step description lacks one of its ops."""
    if any(name not in op_ceilings for name in profile.ops):
        return None
    seconds = sum(op_ceilings[name] * hbm_bytes_per_s for name in profile.ops) / profile.op_bytes_per_s
    return seconds / profile.share_of_device_time
