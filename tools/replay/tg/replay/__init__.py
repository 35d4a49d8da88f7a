"""tg-replay: capture generated kernels and diff them against another version."""
