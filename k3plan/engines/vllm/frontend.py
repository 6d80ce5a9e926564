"""vLLM's API-server flags (``FrontendArgs``): how the OpenAI-compatible server listens, authenticates, logs and
renders chat templates. None of them reaches the worker that sizes the KV pool (Worker.determine_available_memory
measures the model's load, the profile run and the graphs), so ``--serve`` lists them as read and ignored.

Read in the vLLM 0.31.0 wheel (PyPI), vllm/entrypoints/launchers/cli_args.py: ``BaseFrontendArgs`` and
``FrontendArgs`` fields, turned into flags by vllm/engine/arg_utils.py ``get_kwargs`` (a bool field is an
``argparse.BooleanOptionalAction``: ``--X`` and ``--no-X``, no value; a list field takes one or more values,
``nargs="+"``, except where ``FrontendArgs._customize_cli_kwargs`` deletes the nargs: ``--allowed-origins`` /
``--allowed-methods`` / ``--allowed-headers`` take one JSON string, ``--middleware`` is appended one value at a
time, ``--disable-access-log-for-endpoints`` is one comma-separated string). vLLM's parser also takes the
underscore spelling (``--api_key``), which ``--serve`` folds into dashes before this table is read."""

from __future__ import annotations

SOURCE = (
    "vllm-project/vllm 0.31.0 (PyPI wheel) vllm/entrypoints/launchers/cli_args.py BaseFrontendArgs / FrontendArgs, "
    "flags by vllm/engine/arg_utils.py get_kwargs"
)


def _flags(*fields: str) -> frozenset[str]:
    """FrontendArgs' field names as the flags get_kwargs makes of them (--field-name)."""
    return frozenset("--" + name.replace("_", "-") for name in fields)


# bool fields: --X / --no-X, no value
SWITCHES = _flags(
    "trust_request_chat_template",
    "trust_request_mm_kwargs",
    "return_tokens_as_token_ids",
    "enable_auto_tool_choice",
    "exclude_tools_when_tool_choice_none",
    "enable_prompt_tokens_details",
    "enable_per_request_metrics",
    "enable_server_load_tracking",
    "enable_force_include_usage",
    "enable_tokenizer_info_endpoint",
    "enable_log_outputs",
    "enable_log_deltas",
    "cohere_is_reasoning_model",
    "log_error_stack",
    "tokens_only",
    "enable_scale_out",
    "disable_uvicorn_access_log",
    "allow_credentials",
    "enable_ssl_refresh",
    "enable_request_id_headers",
    "disable_fastapi_docs",
    "enable_offline_docs",
    "enable_flash_late_interaction",
)
# list fields that keep nargs="+": one or more values up to the next flag
NARGS = frozenset({"--lora-modules", "--api-key"})
# every other field: one value
VALUED = _flags(
    "chat_template",
    "chat_template_content_format",
    "default_chat_template_kwargs",
    "response_role",
    "tool_call_parser",
    "tool_parser_plugin",
    "tool_strict_level",
    "tool_server",
    "max_log_len",
    "sse_keep_alive_interval",
    "cohere_format",
    "anthropic_disabled_thinking_effort",
    "fingerprint_mode",
    "fingerprint_value",
    "host",
    "port",
    "data_parallel_supervisor_port",
    "dp_supervisor_probe_interval_s",
    "dp_supervisor_probe_timeout_s",
    "dp_supervisor_probe_failure_threshold",
    "uds",
    "uvicorn_log_level",
    "disable_access_log_for_endpoints",
    "allowed_origins",
    "allowed_methods",
    "allowed_headers",
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_ca_certs",
    "ssl_cert_reqs",
    "ssl_ciphers",
    "root_path",
    "middleware",
    "h11_max_incomplete_event_size",
    "h11_max_header_count",
    # added in the 0.32.0 / 0.33.0 wheels (PyPI; vllm/entrypoints/common/cli_args.py from 0.33.0): the gRPC listener's
    # port and the chat request's reasoning-effort names mapped to the template's (a JSON string)
    "grpc_port",
    "reasoning_effort_map",
)


def ignored() -> dict[str, int]:
    """Flag -> values it takes, as ``engines.serve.IGNORED`` reads them (0: a switch; 1: one value or more)."""
    table = {f: 0 for f in SWITCHES}
    table.update({f"--no-{f[2:]}": 0 for f in SWITCHES})
    table.update({f: 1 for f in NARGS | VALUED})
    return table
