"""Device backends. Each module is imported only when its device is first opened."""
