"""Small programs the builtin components run inside jobs (``python -m tether.apps...``)."""
