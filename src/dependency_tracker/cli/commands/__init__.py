"""One module per command; :mod:`dependency_tracker.cli.__main__` assembles them."""
