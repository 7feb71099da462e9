"""The ``tune-agent`` command line (:mod:`agent.cli.main`): commands only, each a thin layer over a service."""

from agent.cli.main import main

__all__ = ["main"]
