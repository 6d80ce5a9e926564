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


class CSA2Dims(_Frozen):
    """DeepSeek-V4.1's CSA2 (text_config's keys): the compressed main KV and the indexer keys live on the
    ``kv_source_layer_ids`` only (each at its own ``compress_ratios[i]``: 2 or 1) and the later layers read
    them; the indexer's queries sit on ``index_source_layer_ids``; a candidate set of
    ``candidate_topk_blocks`` x ``candidate_block_size`` entries picked on ``candidate_source_layer_id`` is
    what the later indexers score."""

    kv_source_layer_ids: tuple[int, ...]
    index_source_layer_ids: tuple[int, ...]
    candidate_source_layer_id: Optional[int] = None
    candidate_topk_blocks: int = 0
    candidate_block_size: int = 0


class EngramDims(_Frozen):
    """DeepSeek-V4.1's Engram (text_config's ``engram_*`` keys): one n-gram hash table a layer in
    ``layer_ids`` (``num_embeddings`` rows of ``head_dim``), read at ``(max_ngram_size - 1) x n_heads`` rows a
    token a layer, whose addresses depend on the input tokens only (so they can be prefetched)."""

    layer_ids: tuple[int, ...]
    num_embeddings: tuple[int, ...]
    max_ngram_size: int
    n_heads: int
    head_dim: int
    vocab_size: int
    compressed_vocab_size: int

    @property
    def rows_per_token_layer(self) -> int:
        return (self.max_ngram_size - 1) * self.n_heads


class DSparkDims(_Frozen):
    """DeepSeek-V4.1's DSpark drafter (text_config's ``dspark_*`` keys): ``num_nextn_predict_layers`` draft
    blocks over ``dspark_target_layer_ids``' hidden states, ``block_size`` draft positions a step."""

    block_size: int
    target_layer_ids: tuple[int, ...]
    markov_rank: int
    n_routed_experts: int
    num_experts_per_tok: int
    # config.json's num_nextn_predict_layers where it is not the stage count: DeepSeek-V4-Flash-0731 keeps the
    # April release's 1 beside its 3 DSpark stages (0: the same as the stages, V4.1); an engine that builds MTP
    # layers from that key builds this many (k3plan.models.families.deepseek_v4 nextn_block)
    nextn_layers: int = 0


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
    # RoPE: rope_theta on the window-only layers, compress_rope_theta on the compressed ones; yarn_positions:
    # rope_scaling's original_max_position_embeddings x factor (0: no YaRN); max_position: max_position_embeddings
    rope_theta: float = 0.0
    compress_rope_theta: float = 0.0
    yarn_positions: int = 0
    max_position: int = 0
    # DeepSeek-V4.1 (k3plan.models.families.deepseek_v41); None for V4
    csa2: Optional[CSA2Dims] = None
    engram: Optional[EngramDims] = None
    dspark: Optional[DSparkDims] = None

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
    def hybrid_mla(self) -> bool:
        """MLA layers beside KDA (linear-attention) layers, one hybrid pool (Kimi-K3, Kimi-Linear)."""
        return bool(self.n_mla and self.n_kda)

    @property
    def dense_mla(self) -> bool:
        """Every attention layer MLA: no KDA and no DeepSeek-V4 compressed attention (DeepSeek-V3 / R1, Kimi-K2)."""
        return bool(self.n_mla) and not self.n_kda and self.dsv4 is None

    @property
    def n_moe(self) -> int:
        return self.mlps.count("moe")
