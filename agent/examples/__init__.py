"""Runnable examples of using tune-agent from your own code (``python -m agent.examples.own_loop``)."""
