"""KDA (Kimi Delta Attention) probe: per-token cost vs sequence length, chunked and recurrent."""
