"""Helpers shared by the test directories: the CLI runners (``helpers.cli``)."""
