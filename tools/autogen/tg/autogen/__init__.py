"""tg-autogen: C headers to Python ctypes bindings through libclang."""
