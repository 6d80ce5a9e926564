"""ModelSpec: the architecture numbers every later stage needs, parsed once from config.json."""

from __future__ import annotations

from typing import Literal, Optional

from k3plan.structs import Frozen

Mixer = Literal["kda", "mla"]  # a layer's token mixer
Mlp = Literal["dense", "moe"]  # a layer's MLP


_Frozen = Frozen


class MLADims(_Frozen):
    heads: int
    q_lora_rank: Optional[int]  # None: a plain q_proj
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    output_gate: bool = False

    @property
    def cache_values_per_token(self) -> int:
        """Absorbed MLA caches the latent plus the (rope or NoPE) dims: 512 + 64 = 576."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def materialised_values_per_token(self) -> int:
        """What a non-absorbed reference caches: heads x (qk head dim + v head dim)."""
        return self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)


class KDADims(_Frozen):
    heads: int
    head_dim: int
    conv_kernel: int
    full_rank_gate: bool

    @property
    def width(self) -> int:
        return self.heads * self.head_dim

    @property
    def recurrent_values(self) -> int:
        """[heads, head_dim, head_dim] per sequence per layer."""
        return self.heads * self.head_dim * self.head_dim

    @property
    def conv_values(self) -> int:
        """(kernel - 1) past tokens for each of q, k, v."""
        return 3 * (self.conv_kernel - 1) * self.width


class DSV4Dims(_Frozen):
    """DeepSeek-V4's attention and routing numbers (k3plan.models.families.deepseek_v4), config.json's keys.

    Every layer attends with one shared-KV head of ``head_dim`` values (rope on the last ``rope_dim``) over
    its last ``sliding_window`` tokens plus, where ``compress_ratios[i]`` is non-zero, entries each of which
    compresses ``ratio`` tokens: CSA (ratio 4, an indexer picks ``index_topk`` of them) or HCA (ratio 128,
    all of them). mHC keeps ``hc_mult`` residual streams; the first ``num_hash_layers`` route by token id."""

    head_dim: int
    rope_dim: int
    sliding_window: int
    compress_ratios: tuple[int, ...]  # the decoder layers' only (config.json lists the MTP layers' after them)
    mtp_compress_ratios: tuple[int, ...] = ()
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    o_groups: int
    o_lora_rank: int
    hc_mult: int
    hc_sinkhorn_iters: int
    num_hash_layers: int

    def kind(self, layer: int) -> str:
        """'swa' (window only), 'csa' (ratio 4, with the indexer) or 'hca' (any other ratio)."""
        r = self.compress_ratios[layer]
        return "swa" if r == 0 else "csa" if r == 4 else "hca"

    @property
    def n_csa(self) -> int:
        return sum(1 for r in self.compress_ratios if r == 4)

    @property
    def n_hca(self) -> int:
        return sum(1 for r in self.compress_ratios if r not in (0, 4))

    @property
    def n_swa(self) -> int:
        return sum(1 for r in self.compress_ratios if r == 0)


class MoEDims(_Frozen):
    num_experts: int
    top_k: int
    expert_in: int  # latent width for LatentMoE, else hidden
    expert_intermediate: int
    num_shared: int
    shared_intermediate: int
    latent: bool


class ModelSpec(_Frozen):
    name: str
    family: str
    architecture: str
    source: str
    hidden_size: int
    vocab_size: int
    num_layers: int
    mixers: tuple[Mixer, ...]  # per layer, 0-indexed
    mlps: tuple[Mlp, ...]
    dense_intermediate: int
    mla: MLADims
    kda: Optional[KDADims] = None
    dsv4: Optional[DSV4Dims] = None  # DeepSeek-V4's compressed attention; its layers are "mla" in ``mixers``
    moe: MoEDims
    mtp_layers: int = 0
    max_context: Optional[int] = None
    notes: tuple[str, ...] = ()  # where config rules and checkpoint truth differ, etc.
    attn_res_block_size: Optional[int] = None  # Attention Residuals: a block of the history every this many layers

    def context_warning(self, context_tokens: int) -> Optional[str]:
        """One wording for every command whose --context is beyond what the model's positions serve."""
        if self.max_context and context_tokens > self.max_context:
            return f"--context {context_tokens:,} exceeds the model's max_position_embeddings {self.max_context:,}"
        return None

    @property
    def n_mla(self) -> int:
        return self.mixers.count("mla")

    @property
    def n_kda(self) -> int:
        return self.mixers.count("kda")

    @property
    def n_moe(self) -> int:
        return self.mlps.count("moe")
