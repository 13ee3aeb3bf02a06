"""One read model of payload state, whichever system runs the payloads.

In normal mode the tracker runs every payload and its own state table holds the
truth. In cirrus mode (docs/cirrus.md) cirrus-geo runs them and only cirrus's
state table knows how a run went; the tracker's table keeps just the records of
messages it refused. Every command reads payload state through a
:class:`PayloadReader`, which gives both as a :class:`PayloadView`, so no
command reports a payload cirrus is running as "not found".

``view`` holds the view and what an id names, ``paging`` the paged Scan and its
tokens, ``filters`` what a listing selects, ``readers`` the two readers.
"""

from dependency_tracker_cli.readmodel.filters import PayloadFilter, time_filter_parts, within
from dependency_tracker_cli.readmodel.paging import (
    Expression,
    InvalidNextTokenError,
    PageRequest,
    ScanResult,
    decode_token,
    encode_token,
    scan_page,
)
from dependency_tracker_cli.readmodel.readers import (
    CirrusPrefix,
    CirrusReader,
    CirrusStateTableName,
    PayloadReader,
    TrackerReader,
)
from dependency_tracker_cli.readmodel.view import (
    PayloadSource,
    PayloadView,
    as_view,
    collections_of,
    workflow_of,
)

__all__ = [
    "CirrusPrefix",
    "CirrusReader",
    "CirrusStateTableName",
    "Expression",
    "InvalidNextTokenError",
    "PageRequest",
    "PayloadFilter",
    "PayloadReader",
    "PayloadSource",
    "PayloadView",
    "ScanResult",
    "TrackerReader",
    "as_view",
    "collections_of",
    "decode_token",
    "encode_token",
    "scan_page",
    "time_filter_parts",
    "within",
    "workflow_of",
]
