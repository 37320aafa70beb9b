"""One module per `bridge` subcommand (see bridge/cli.py)."""
