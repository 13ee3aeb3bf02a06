# The join row types register their kind with the table's row decoding (table/rows.py)
# here, before any submodule runs: every reader of the table decodes a join row as one.
import dependency_tracker.joins.rows  # noqa: F401

__version__ = "0.1.0"
