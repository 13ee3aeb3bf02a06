"""One module per command; :mod:`dependency_tracker_cli.__main__` assembles them."""
