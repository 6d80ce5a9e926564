"""vLLM's ``--engram-config`` (DeepSeek-V4.1's Engram tables) as ``vllm serve`` reads it, from vLLM's own config
class (vllm-project/vllm vllm/config/engram.py EngramConfig @13ab20ec, dsv4.ENGRAM_COMMIT):

- ``cpu_offload`` (default ``envs.VLLM_PLE_CPU_OFFLOAD``, enabled): the tables in pinned host memory, looked up
  over UVA; false: in HBM, rows over the TP group -> k3plan's ``--engram host`` / ``hbm``;
- ``dp_shared_memory`` (default false): "Each node stores one copy of every TP shard" instead of one a DP replica
  -> the host's copies (``EngramPlacement.host_copies`` "node"); vLLM refuses it without ``cpu_offload`` and with
  ``data_parallel_size`` 1 (``_validate_shared_memory``, ``verify_parallel_config``);
- ``thp_packing``: the host pages' kind (transparent huge pages), no byte k3plan prices changes; vLLM refuses it
  without ``cpu_offload`` or with ``dp_shared_memory``;
- ``embedding_across_dp``: with ``data_parallel_size`` > 1 the tables shard over TP x DP: not priced (refused by
  name); with one replica it changes nothing (``get_parallel_size``).

vLLM also refuses the config for a model without Engram layers and off CUDA / ROCm (``verify_model_config``).

The released wheels from 0.31.0 (PyPI; read in the 0.31.0-0.34.0 wheels, vllm/config/engram.py EngramConfig; the
0.30.0 wheel has @13ab20ec's defaults without thp_packing) differ: ``cpu_offload`` defaults to True (no
``VLLM_PLE_CPU_OFFLOAD``: the variable is gone from vllm/envs.py, so a command's export changes nothing),
``dp_shared_memory`` defaults to None and ``resolve_dp_shared_memory`` turns it on wherever ``cpu_offload`` holds,
``use_thp`` does not, and ``data_parallel_size`` > 1 ('Share host tables by default wherever the configuration
permits'), and the huge-page switch is named ``use_thp``. So from 0.31.0 a DP deployment holds one copy of each TP
shard a node by default (``ENGRAM_WHEEL_FROM``; the engine's default placement, engines/vllm/dsv4.py ENGRAM, is that
release's: k3plan reads a command without --engine-version as 0.31.0).
"""

from __future__ import annotations

from k3plan.engines.serve_values import json_object
from k3plan.engines.vllm.dsv4 import ENGRAM_COMMIT
from k3plan.errors import K3PlanError
from k3plan.structs import Frozen

ENV = "VLLM_PLE_CPU_OFFLOAD"  # EngramConfig.cpu_offload's default (_default_cpu_offload)
_SOURCE = f"vllm-project/vllm vllm/config/engram.py EngramConfig @{ENGRAM_COMMIT[:8]}"


def _at(symbol: str) -> str:
    return f"vllm-project/vllm vllm/config/engram.py EngramConfig.{symbol} @{ENGRAM_COMMIT[:8]}"


# the released wheels (0.31.0-0.34.0, PyPI: vllm/config/engram.py EngramConfig) name thp_packing use_thp: the same
# host-page kind, read alike
_KEYS = ("cpu_offload", "dp_shared_memory", "thp_packing", "use_thp", "embedding_across_dp")
ENGRAM_WHEEL_FROM = (0, 31, 0)  # the release whose EngramConfig defaults k3plan's vLLM default follows (above)
_WHEEL_KEYS = ("cpu_offload", "dp_shared_memory", "use_thp", "embedding_across_dp")
_WHEEL_SOURCE = "vllm/config/engram.py EngramConfig (vllm 0.31.0-0.34.0 wheels, PyPI)"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class EngramRead(Frozen):
    """A command's Engram placement as vLLM reads it: ``placement`` "host" / "hbm", ``host_copies`` "node" where
    ``dp_shared_memory`` shares one copy a node (None: the engine's default, one a DP replica)."""

    placement: str
    host_copies: str | None
    given: str


def _bool(where: str, value) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise K3PlanError(f"--serve: {where} {value!r}: expected true or false")


def read_engram(
    raw: str | None,
    env: dict[str, str],
    *,
    dp: int,
    platform: str,
    release: tuple[int, int, int] | None = None,
) -> EngramRead | None:
    """``--engram-config`` and ``VLLM_PLE_CPU_OFFLOAD`` -> where the tables live (None: the engine's default, its
    ``ENGRAM`` placement); what vLLM refuses at start is one line here, with its own reason. ``release``: the command's
    vLLM release: from ``ENGRAM_WHEEL_FROM`` the wheels' fields and defaults (module docstring), before it or with
    none named @13ab20ec's, which keep a copy a DP replica."""
    wheel = release is not None and release >= ENGRAM_WHEEL_FROM
    env_raw = None if wheel else env.get(ENV)  # the wheels read no such variable
    if raw is None and env_raw is None:
        if dp > 1 and not wheel:  # @13ab20ec (and 0.30.0): dp_shared_memory False, a copy a DP replica
            return EngramRead(placement="host", host_copies="replica", given="")
        return None
    default = True if env_raw is None else _bool(f"{ENV}=", env_raw)
    cfg = {} if raw is None else json_object("--engram-config", raw)
    keys = _WHEEL_KEYS if wheel else _KEYS
    unknown = sorted(set(cfg) - set(keys))
    if unknown:
        raise K3PlanError(
            f"--serve: --engram-config key {unknown[0]!r} is not one of vLLM's EngramConfig fields "
            f"({', '.join(keys)}; {_WHEEL_SOURCE if wheel else _SOURCE})"
        )
    offload = _bool("--engram-config cpu_offload", cfg.get("cpu_offload", default))
    thp_given = _bool("--engram-config use_thp", cfg.get("use_thp", False)) or _bool(
        "--engram-config thp_packing", cfg.get("thp_packing", False)
    )
    # the wheels' dp_shared_memory None: on wherever the configuration permits (resolve_dp_shared_memory)
    shared_default = wheel and offload and not thp_given and dp > 1
    shared = _bool("--engram-config dp_shared_memory", cfg.get("dp_shared_memory", shared_default))
    thp = thp_given
    across = _bool("--engram-config embedding_across_dp", cfg.get("embedding_across_dp", False))
    if platform == "tpu" and raw is not None:
        raise K3PlanError(
            "--serve: --engram-config on a TPU: vLLM refuses it off CUDA ('EngramConfig requires a model with "
            f"supported Engram embeddings, non-empty n-gram layer ids, and CUDA.': {_at('verify_model_config')})"
        )
    if shared and not offload:
        raise K3PlanError(
            f"--serve: --engram-config: vLLM refuses it ('dp_shared_memory requires cpu_offload=True'; {_SOURCE})"
        )
    if thp and (not offload or shared):
        raise K3PlanError(
            f"--serve: --engram-config: vLLM refuses it ('{'use_thp' if wheel else 'thp_packing'} requires "
            f"cpu_offload=True and dp_shared_memory=False'; {_WHEEL_SOURCE if wheel else _SOURCE})"
        )
    if shared and dp <= 1:
        raise K3PlanError(
            f"--serve: --engram-config: vLLM refuses it ('dp_shared_memory requires data_parallel_size > 1.'; "
            f"{_at('verify_parallel_config')})"
        )
    if across and dp > 1:
        raise K3PlanError(
            "--serve: --engram-config embedding_across_dp with data parallelism: the tables sharded over TP x DP "
            f"ranks are not priced by k3plan ({_at('get_parallel_size')}); remove it to price one TP-sharded copy "
            "a replica"
        )
    given = " ".join(
        g for g in (f"{ENV}={env_raw}" if env_raw is not None else "", f"--engram-config {raw}" if raw else "") if g
    )
    copies = "node" if shared else ("replica" if dp > 1 and offload else None)
    return EngramRead(placement="host" if offload else "hbm", host_copies=copies, given=given)
