"""Answering a parent's task token: one send, its retries and refusals, its output's bound."""
