"""The `zhiku` command line (``zhiku.cli.app``)."""
