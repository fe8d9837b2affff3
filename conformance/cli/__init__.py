"""The harness from the command line: ``posenc conformance`` (its arguments, the frozen
settings they become, and the job that runs them) and ``posenc check``. The pytest plugin
builds its options here too, so a flag means the same in either."""
