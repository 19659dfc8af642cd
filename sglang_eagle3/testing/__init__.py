"""What serves tests and demos, not serving: the CPU harness, tiny models, the demo."""
