"""`python -m datapipe` runs the CLI."""

from datapipe.cli.main import main

main()
