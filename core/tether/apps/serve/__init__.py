"""App of the ``serve.torchserve`` component."""
