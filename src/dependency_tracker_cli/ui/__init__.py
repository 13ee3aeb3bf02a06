"""``dependency-tracker ui``: a read-only page of the tracker's state (Flask, inline SVG)."""
