# The join row types register their kind with the table's row decoding (table/rows.py)
# here, before any submodule runs: every reader of the table decodes a join row as one.
import dependency_tracker.joins.rows  # noqa: F401

__version__ = "0.1.0"

# The public reader of a join's results manifest (docs/contract.md, "Results manifest").
from dependency_tracker.joins.results import MemberResult, read_results

__all__ = ["MemberResult", "__version__", "read_results"]
