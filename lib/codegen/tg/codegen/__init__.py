"""The tg compiler core: dtypes, the UOp IR, rewrites, scheduler, lowering, renderers."""
