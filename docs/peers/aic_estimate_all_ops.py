"""Run `aiconfigurator cli estimate` unchanged, except that the --detail time tables list every op
(the CLI's formatter cuts them at 12 ops plus an "others" row; top_n_ops is its keyword argument)."""

import functools
import sys

import aiconfigurator.cli.main as cli_main
from aiconfigurator.main import main

cli_main.format_estimate_detail_report = functools.partial(cli_main.format_estimate_detail_report, top_n_ops=1000)
sys.exit(main())
