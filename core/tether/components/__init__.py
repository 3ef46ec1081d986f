"""Components: plain typed Python functions that return an :class:`~tether.specs.AppDef`.

A component's signature is its command line: ``tether run dist.ddp -j 1x2 --script train.py``
calls :func:`tether.components.dist.ddp` with ``j="1x2", script="train.py"``. The pieces:

* :mod:`tether.components.finder` resolves a component name (builtins, ``path/file.py:fn``,
  ``package.module:fn``, entry points of the ``tether.components`` group);
* :mod:`tether.components.args` turns a signature plus Google-style docstring into arguments
  and calls the function (:func:`~tether.components.args.materialize`);
* :mod:`tether.components.validate` is the linter for component authors;
* :mod:`~tether.components.dist`, :mod:`~tether.components.utils`,
  :mod:`~tether.components.serve` and :mod:`~tether.components.metrics` are the builtins.

Importing this package imports nothing heavy (no torch, no scheduler).
"""

import os

__tether_not_components__ = (
    "args", "builders", "finder", "literals", "params", "structured_arg", "validate",
)
"""Sub-modules that hold the machinery, not components (skipped by the finder)."""

DEFAULT_IMAGE: str = os.environ.get("TETHER_IMAGE", "ghcr.io/tether-ml/tether:latest")
"""The one definition of tether's default image: the builtin components run it when
``--image`` is not given, the KFP adapter's launcher step runs it, ``make image`` builds it
(from ``images/tether/Dockerfile``). ``$TETHER_IMAGE`` overrides it. ``local_cwd`` ignores
images; a dry-run on a remote backend warns when a role runs it (push your own build)."""
