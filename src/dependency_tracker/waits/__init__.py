"""Waits: process-queue messages, the process and callback flows, outputs."""
