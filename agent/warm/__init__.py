"""The warm process: a per-user process that keeps tune-agent's libraries imported and forks one
process per command, so a command starts in a fraction of a second.

- :mod:`agent.warm.process`: what it is, its rules (keyed, private, bounded, said), the client's
  side (:func:`~agent.warm.process.forward`) and its start and stop;
- :mod:`agent.warm.server`: the warm process itself, and the fork that runs one command;
- :mod:`agent.warm.relay`: the signals a terminal sends, relayed to the command;
- :mod:`agent.warm.launch`: how a command's process came to be (:class:`~agent.warm.launch.Launch`),
  handed to the command line's entry point rather than set as a global.

docs/concepts/warm-process.md is the user's page.
"""
