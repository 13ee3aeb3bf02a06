"""The sweeper: a bounded scan that sends what the stream missed."""
