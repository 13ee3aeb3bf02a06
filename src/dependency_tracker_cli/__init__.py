"""The ``dependency-tracker`` command (needs the ``cli`` extra: Typer and Rich)."""
