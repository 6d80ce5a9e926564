"""Typed, named access to a HF config.json: every missing or bad field is a K3PlanError naming it."""

from __future__ import annotations

import builtins
import re
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import msgspec

from k3plan.errors import K3PlanError
from k3plan.specfile import Spec, error_at

_MISSING = object()

# Sanity bounds, not model facts: published configs have at most a few hundred layers, widths and
# expert counts in the tens of thousands, vocabularies of ~10^5-10^6 and contexts of ~10^7 tokens.
# A value past these is a typo or a hostile file; accepting it would print nonsense (or build a
# layer list that exhausts memory).
MAX_LAYERS = 4096
MAX_DIM = 2**20  # widths, head counts, ranks, expert counts
MAX_BY_KEY = {
    "num_hidden_layers": MAX_LAYERS,
    "vocab_size": 2**24,
    "max_position_embeddings": 2**31 - 1,
    "model_max_length": 2**31 - 1,
}


class ConfigReader:
    def __init__(self, data: dict, *, source: str, prefix: str = "") -> None:
        if not isinstance(data, dict):
            raise K3PlanError(f"{source}: '{prefix.rstrip('.') or 'config'}' must be a JSON object")
        self.data, self.source, self.prefix = data, source, prefix

    def _where(self, key: str) -> str:
        return f"{self.source}: field '{self.prefix}{key}'"

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = _MISSING) -> Any:
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise K3PlanError(f"{self._where(key)} is missing")
            return default
        return value

    def int(self, key: str, default: Any = _MISSING, *, minimum: int = 1, maximum: int | None = None) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise K3PlanError(f"{self._where(key)} is {_short(value)}; expected an integer")
        top = maximum if maximum is not None else MAX_BY_KEY.get(key, MAX_DIM)
        if not minimum <= value <= top:
            raise K3PlanError(f"{self._where(key)} is {value}; expected an integer from {minimum} to {top:,}")
        return value

    # below, ``int`` and ``bool`` name the methods above: annotations say builtins.int / builtins.bool
    def opt_int(self, key: str, *, minimum: builtins.int = 1) -> builtins.int | None:
        return self.int(key, minimum=minimum) if self.has(key) else None

    def bool(self, key: str, default: builtins.bool = False) -> builtins.bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise K3PlanError(f"{self._where(key)} is {_short(value)}; expected true or false")
        return value

    def int_list(self, key: str, default: Any = _MISSING, *, maximum: builtins.int = MAX_LAYERS) -> list[builtins.int]:
        value = self.get(key, default)
        if (
            not isinstance(value, list)
            or len(value) > MAX_LAYERS
            or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= maximum for v in value)
        ):
            raise K3PlanError(
                f"{self._where(key)} is {_short(value)}; expected a list of at most {MAX_LAYERS} "
                f"integers from 0 to {maximum:,}"
            )
        return value

    def sub(self, key: str, *, required: builtins.bool = True) -> ConfigReader:
        if not required and not self.has(key):
            return ConfigReader({}, source=self.source, prefix=f"{self.prefix}{key}.")
        return ConfigReader(self.get(key), source=self.source, prefix=f"{self.prefix}{key}.")


class _Quant(Spec, forbid_unknown_fields=False):
    """A quantization_config as read (a msgspec Struct, converted strictly: "128" or 128.0 is not a block size).
    Keys it does not declare (activation_scheme, config_groups, ...) are the engines' business: ignored, as
    nothing in k3plan reads them."""

    METHOD: ClassVar[str]  # the quant_method this scheme is


class Fp8BlockQuant(_Quant):
    """DeepSeek-V3 style: e4m3 weights, an f32 scale per [128, 128] block (formats.fp8_block)."""

    METHOD = "fp8"
    quant_method: Literal["fp8"]
    fmt: Literal["e4m3"] = "e4m3"
    weight_block_size: Annotated[list[Annotated[int, msgspec.Meta(gt=0)]], msgspec.Meta(min_length=2, max_length=2)] = (
        msgspec.field(default_factory=lambda: [128, 128])
    )
    storage: Literal["fp8_block"] = "fp8_block"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.weight_block_size != [128, 128]:  # the one block shape formats.fp8_block stores
            raise ValueError("weight_block_size: only [128, 128] blocks are modelled")


class _CtWeights(_Quant):
    """A compressed-tensors config group's ``weights`` scheme, the keys that decide the stored bytes."""

    METHOD = ""
    num_bits: int
    type: Literal["int", "float"]
    strategy: str | None = None
    group_size: int | None = None
    symmetric: bool = True


class _CtGroup(_Quant):
    METHOD = ""
    weights: _CtWeights


class CompressedTensorsQuant(_Quant):
    """compressed-tensors: MXFP4 (Kimi K3's routed experts; formats.mxfp4) or pack-quantized symmetric int4 with
    group scales (Kimi-K2.5/K2.6's routed experts, W4A16; formats.INT4_GROUP_FORMATS)."""

    METHOD = "compressed-tensors"
    quant_method: Literal["compressed-tensors"]
    format: Literal["mxfp4-pack-quantized", "pack-quantized"]
    ignore: list[str] = []
    config_groups: dict[str, _CtGroup] = {}

    @property
    def storage(self) -> str:
        if self.format == "mxfp4-pack-quantized":
            return "mxfp4"
        from k3plan.models.formats import INT4_GROUP_FORMATS

        return INT4_GROUP_FORMATS[self._int4_group()]

    def _int4_group(self) -> int:
        """The one int4 group size every config group stores (pack-quantized); ValueError otherwise."""
        from k3plan.models.formats import INT4_GROUP_FORMATS

        w = [g.weights for g in self.config_groups.values()]
        if not w:
            raise ValueError("config_groups: a pack-quantized config needs a group with its weights scheme")
        sizes = {x.group_size for x in w}
        ok = all(x.num_bits == 4 and x.type == "int" and x.strategy == "group" and x.symmetric for x in w)
        if not ok or len(sizes) != 1 or next(iter(sizes)) not in INT4_GROUP_FORMATS:
            raise ValueError(
                "config_groups: only symmetric 4-bit int weights with group scales of one group size "
                f"({', '.join(map(str, INT4_GROUP_FORMATS))}) are modelled for pack-quantized"
            )
        return int(next(iter(sizes)))  # type: ignore[arg-type]

    def ignore_patterns(self) -> list[re.Pattern]:
        return [re.compile(p[3:]) for p in self.ignore if p.startswith("re:")]

    def __post_init__(self) -> None:
        super().__post_init__()
        for p in self.ignore:
            if p.startswith("re:"):
                try:
                    re.compile(p[3:])
                except re.error as err:
                    raise ValueError(f"ignore: pattern {p!r}: {err}") from None
        if self.format == "pack-quantized":
            self._int4_group()


class ModelOptQuant(_Quant):
    """NVIDIA ModelOpt's NVFP4 export (formats.nvfp4): the keys of its hf_quant_config.json ``quantization`` object,
    as a DeepseekV3ForCausalLM config carries them under ``quantization_config`` with ``quant_method: modelopt``
    (vLLM's and SGLang's ModelOpt configs read both spellings). ``exclude_modules``: ModelOpt's wildcards (``*``
    any run of characters, fnmatch's rules) naming the Linears left unquantized (BF16)."""

    METHOD = "modelopt"
    quant_method: Literal["modelopt"]
    quant_algo: Literal["NVFP4"]
    group_size: Literal[16] = 16  # the one NVFP4 block formats.nvfp4 stores
    kv_cache_quant_algo: Literal["FP8"] | None = None
    exclude_modules: list[str] = []
    storage: Literal["nvfp4"] = "nvfp4"

    def excluded(self, module: str) -> bool:
        """Whether the Linear named ``module`` (``model.layers.3.self_attn.o_proj``, no ``.weight``) is left BF16."""
        import fnmatch

        return any(fnmatch.fnmatchcase(module, p) for p in self.exclude_modules)


class _QuarkTensorSpec(_Quant):
    """One tensor's scheme in a Quark config (``weight``, ``input_tensors``): the keys that decide the bytes."""

    METHOD = ""
    dtype: str
    qscheme: str | None = None
    group_size: int | None = None
    scale_format: str | None = None
    is_dynamic: bool | None = None


class _QuarkLayerSpec(_Quant):
    METHOD = ""
    weight: _QuarkTensorSpec | None = None
    input_tensors: _QuarkTensorSpec | None = None
    output_tensors: dict[str, Any] | None = None
    bias: dict[str, Any] | None = None


class QuarkQuant(_Quant):
    """AMD Quark's export (``quant_method: quark``) of OCP MXFP4 weights and activations (formats.quark_mxfp4): the
    one ``global_quant_config`` every Linear not in ``exclude`` takes. Only the W4A4 scheme both SGLang's
    QuarkConfig._is_mx_fp4 and vLLM's Quark OCP MX scheme load as stored is modelled -- fp4 weights and activations,
    ``per_group`` 32 with ``e8m0`` scales, static weights, dynamic activations; per-layer or per-type configs (Quark's
    ``layer_quant_config`` / ``layer_type_quant_config``, a second scheme) are refused. ``exclude``: wildcards
    (``*`` any run of characters, fnmatch's rules) naming the Linears left unquantized (BF16)."""

    METHOD = "quark"
    quant_method: Literal["quark"]
    global_quant_config: _QuarkLayerSpec
    exclude: list[str] = []
    layer_quant_config: dict[str, Any] = {}
    layer_type_quant_config: dict[str, Any] = {}
    storage: Literal["quark_mxfp4"] = "quark_mxfp4"

    def __post_init__(self) -> None:
        super().__post_init__()
        g = self.global_quant_config
        for key, spec, dynamic in (("weight", g.weight, False), ("input_tensors", g.input_tensors, True)):
            mx = (
                spec is not None
                and spec.dtype == "fp4"
                and spec.qscheme == "per_group"
                and spec.group_size == 32
                and spec.scale_format == "e8m0"
                and bool(spec.is_dynamic) is dynamic
            )
            if not mx:
                raise ValueError(
                    f"global_quant_config.{key}: only OCP MXFP4 (dtype fp4, qscheme per_group, group_size 32, "
                    f"scale_format e8m0, is_dynamic {str(dynamic).lower()}) is modelled"
                )
        if g.output_tensors or g.bias:
            raise ValueError("global_quant_config: quantized output_tensors or bias are not modelled")
        if self.layer_quant_config or self.layer_type_quant_config:
            raise ValueError(
                "layer_quant_config / layer_type_quant_config: a second Quark scheme is not modelled; only the "
                "global one with its exclude list"
            )

    def excluded(self, module: str) -> bool:
        """Whether the Linear named ``module`` (``model.layers.3.self_attn.o_proj``, no ``.weight``) is left BF16."""
        import fnmatch

        return any(fnmatch.fnmatchcase(module, p) for p in self.exclude)


Quantization = Fp8BlockQuant | CompressedTensorsQuant | ModelOptQuant | QuarkQuant


Q = TypeVar("Q", bound=_Quant)


def quantization(c: ConfigReader, *, accepted: tuple[type[Q], ...]) -> Q | None:
    """The config's ``quantization_config`` checked against the schemes this family stores; None
    if absent. An unknown method, a wrong type or a bad block size is a K3PlanError naming the key."""
    if not c.has("quantization_config"):
        return None
    raw = c.get("quantization_config")
    where = f"{c.source}: field '{c.prefix}quantization_config"
    if not isinstance(raw, dict):
        raise K3PlanError(f"{where}' is {_short(raw)}; expected a JSON object")
    methods = {m.METHOD: m for m in accepted}
    method = raw.get("quant_method")
    model = methods.get(method) if isinstance(method, str) else None
    if model is None:
        raise K3PlanError(
            f"{where}.quant_method' is {_short(method)}; expected one of {', '.join(repr(m) for m in methods)}"
        )
    data = {k: v for k, v in raw.items() if k != "storage"}
    try:
        return msgspec.convert(data, model, strict=True)
    except msgspec.ValidationError as err:
        keys, msg = error_at(err, model)
        key = ".".join(keys)
        if msg == "missing key":
            raise K3PlanError(f"{where}.{key}' is missing") from None
        got = f" is {_short(_at(data, keys))}" if key else ""
        raise K3PlanError(f"{where}{'.' + key if key else ''}'{got}: {msg}") from None


def _at(data: Any, keys: list[str]) -> Any:
    """The value at ``keys`` (as error_at gives them) in ``data``."""
    for k in keys:
        data = data[int(k)] if isinstance(data, list) else data.get(k) if isinstance(data, dict) else None
    return data


def _short(value: Any, limit: int = 60) -> str:
    """repr for an error line: one line, at most `limit` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
