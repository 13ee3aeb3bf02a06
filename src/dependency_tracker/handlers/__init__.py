"""Lambda entry points: parse the event, call the flow, report per record."""
