"""The report's search for the smallest viable topology, in-process."""


def test_a_model_without_kda_layers_is_reported():
    """DeepSeek-V3 has MLA on every layer (no KDA heads): the TP candidates must come from the MLA
    heads alone instead of failing on the missing KDA dims."""
    from k3plan.report.viable import smallest_viable

    chosen, tried = smallest_viable(
        model="deepseek-v3", hardware="tpu-v7x", stack="vllm-tpu", contexts=[32768], concurrency=1, max_chips=64
    )
    assert tried > 0
    assert chosen[32768].setup is not None and chosen[32768].result.fits
    assert 128 % chosen[32768].setup.parallel.tp == 0
