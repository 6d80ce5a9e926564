"""The serving engines as their code has them (each rule cited: repository, file, symbol, commit), one folder an
engine (``engines/<engine>/``: its ``stack.yaml`` -- runtime formats, KV layout, state, paging, pool sizing,
reserve, sharding rules, collectives -- its ``ENGINE`` description and its own rules: KV-pool sizing, DeepSeek-V4
cache layout, flags, launch line), found by ``registry``. Engine-neutral machinery here: the ``Engine`` type
(``engine``), the stack schema (``stack``, ``stack_sections``, ``stack_options``), the serve-command reader
(``serve``), the flags by launcher (``flags``) and the launch file (``launch``, ``launch_config``)."""
