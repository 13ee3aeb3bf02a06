"""Dependency cycles: wait edges and the guard that refuses a closing wait."""
