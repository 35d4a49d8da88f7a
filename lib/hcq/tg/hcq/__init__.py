"""The tg runtime: devices, buffers, programs, hardware command queues and signals."""
