"""Joins: one task token waiting on k of n payloads (models, store, manifest, flows)."""
