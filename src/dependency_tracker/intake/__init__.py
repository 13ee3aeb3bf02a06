"""The process queue's intake: each message parsed once, routed to the flow that owns its kind."""
