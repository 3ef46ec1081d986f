"""Built-in tracker backends (imported lazily through :mod:`tether.tracker.registry`)."""
