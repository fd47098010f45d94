"""The `datapipe` command: thin wrappers that parse arguments, call the library and print."""
