"""Command-line tools: viable-train, viable-eval."""
