"""The ``tether`` command line (see :mod:`tether.cli.main`)."""
