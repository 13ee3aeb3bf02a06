"""Shared ground: settings, errors, limits, naming, tokens, clients, observability."""
