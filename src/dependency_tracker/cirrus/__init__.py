"""Cirrus mode: a cirrus-geo v2 deployment runs the payloads, the tracker keeps the waits."""
