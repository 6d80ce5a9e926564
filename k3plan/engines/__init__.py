"""The serving engines as their code has them (each rule cited: repository, file, symbol, commit):
``stack`` (a stack YAML in ``stacks/``: runtime formats, KV layout, state, paging, pool sizing, reserve,
sharding rules, collectives), ``flags`` (the flags k3plan writes and the code that defines each) and
``launch`` (the launch command of a configuration)."""
