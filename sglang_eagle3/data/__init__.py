"""Training data: speculators-format hidden states (read and written) and tap fingerprints."""
