"""The scheduler: from the tensor graph that tg.tensor builds to a linear list of kernel calls."""
