"""Joins: one task token waiting on k of n payloads.

* :mod:`.registration`: a join message (or its continuation) registers its
  members chunk by chunk and starts, replays or leaves each one;
* :mod:`.counting`: a member's outcome is counted once and the join decided once;
* :mod:`.summary`: what the decided join sends its parent.
"""
