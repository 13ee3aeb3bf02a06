"""Table and bucket access: one module per store, low-level clients injected."""

from dependency_tracker.stores.dependency_table import DependencyTable
from dependency_tracker.stores.manifest import ManifestReader, ManifestSlice, manifest_text
from dependency_tracker.stores.payload_bucket import PayloadBucket
from dependency_tracker.stores.state_table import StateTable

__all__ = [
    "DependencyTable",
    "ManifestReader",
    "ManifestSlice",
    "PayloadBucket",
    "StateTable",
    "manifest_text",
]
