"""`python -m k3plan` is the `k3plan` command."""

from k3plan.cli.app import main

main()
