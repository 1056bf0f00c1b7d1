"""litegpu's pytest plugin (the ``litegpu_backend`` fixture) is opt-in: this line opts in."""

pytest_plugins = ["litegpu.testing.pytest_plugin"]
