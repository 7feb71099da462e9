"""``python -m agent.cli``: the ``tune-agent`` command."""

from agent.cli.main import main

main()
