"""The callback path: each row the stream (or the sweeper) hands over, to its flow."""
