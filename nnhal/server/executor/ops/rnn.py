"""rnn operations (to be implemented)."""
