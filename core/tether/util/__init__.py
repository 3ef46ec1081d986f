"""Small helpers shared by several layers (no third-party imports)."""
