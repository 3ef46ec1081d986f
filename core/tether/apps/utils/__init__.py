"""Apps of the ``utils.*`` and ``metrics.*`` components."""
