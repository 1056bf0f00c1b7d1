"""Developer tools (support matrix)."""
