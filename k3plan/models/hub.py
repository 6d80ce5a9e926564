"""The Hugging Face id of each bundled model: the name an engine downloads and resolves (``org/name``), which a
launch line must carry (``vllm serve kimi-k3`` names no repository, so the engine cannot find it).

A bundled folder's provenance.json names its repository (``model``); for the folders without one, each id is the
repository the bundled config.json is the public config of, with where that is recorded:
- kimi-k3: moonshotai/Kimi-K3 -- the id of the engines' own K3 runs k3plan ships as evidence (the torch_tpu
  plugin's nightly and AgentX configs, tests/engines/cases/torchtpu-k3-*.yaml) and the one aiconfigurator resolves
  to the same config (docs/peers/aiconfigurator-0.12.0-k3-h200-*.txt: "Loaded model config for moonshotai/Kimi-K3:
  architecture=KimiK3ForConditionalGeneration, layers=93").
- deepseek-v4-flash / deepseek-v4-pro: deepseek-ai/DeepSeek-V4-Flash / deepseek-ai/DeepSeek-V4-Pro -- the model
  cards the configs and the checkpoint totals were read from (tests/models/test_deepseek_v4.py's docstring).
- deepseek-v3: deepseek-ai/DeepSeek-V3 -- config.json: model_type deepseek_v3, 256 routed experts, vocabulary
  129,280, one MTP layer (docs/k3-facts.md "DeepSeek-V3 671B total / 37B active").
- kimi-k2: moonshotai/Kimi-K2-Instruct -- config.json: model_type kimi_k2, 384 experts, max_position_embeddings
  131,072 with YaRN factor 32 (the July 2025 release; -Instruct-0905 has 262,144 and factor 64); the serving
  recipes run the Instruct checkpoint (vllm-project/recipes, moonshotai/Kimi-K2.md).
- kimi-linear-48b-a3b: moonshotai/Kimi-Linear-48B-A3B-Instruct -- the checkpoint MoonshotAI/Kimi-Linear's README
  links and vLLM's recipe serves (vllm-project/recipes moonshotai/Kimi-Linear.md: ``vllm serve
  moonshotai/Kimi-Linear-48B-A3B-Instruct``).
"""

from __future__ import annotations

HF_IDS = {
    "kimi-k3": "moonshotai/Kimi-K3",
    "deepseek-v4-flash": "deepseek-ai/DeepSeek-V4-Flash",
    "deepseek-v4-pro": "deepseek-ai/DeepSeek-V4-Pro",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
    "kimi-linear-48b-a3b": "moonshotai/Kimi-Linear-48B-A3B-Instruct",
}


def hf_id(model: str) -> str | None:
    """The Hugging Face id of bundled model ``model``: its provenance.json's ``model`` where the folder has one
    (deepseek-v4.1-flash: "deepseek-ai/DeepSeek-V4.1-Flash", with the revisions its config was read at), else
    HF_IDS; None for a model k3plan does not bundle (a config.json path)."""
    from k3plan.models.loader import BUNDLED_DIR, bundled_models

    if model not in bundled_models():
        return None
    prov = BUNDLED_DIR / model / "provenance.json"
    if prov.is_file():
        import json

        repo = json.loads(prov.read_text()).get("model")
        if isinstance(repo, str) and "/" in repo:
            return repo
    return HF_IDS.get(model)


def bundled_of(repo: str) -> str | None:
    """The bundled model whose Hugging Face id is ``repo`` (case-insensitive, as the Hub resolves ids); None if none."""
    from k3plan.models.loader import bundled_models

    key = repo.strip().rstrip("/").lower()
    return next((m for m in bundled_models() if (hf_id(m) or "").lower() == key), None)
