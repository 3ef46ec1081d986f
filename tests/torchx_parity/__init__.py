"""A TorchX user's code and unit tests, renamed to tether (issue 35)."""
