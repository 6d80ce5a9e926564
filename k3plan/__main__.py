"""`python -m k3plan` is the `k3plan` command."""

import sys

try:  # Ctrl-C while the CLI imports: one line and exit 130, as during a command (k3plan.cli.app.main)
    from k3plan.cli.app import main
except KeyboardInterrupt:
    sys.stderr.write("interrupted (Ctrl-C)\n")
    sys.exit(130)

main()
