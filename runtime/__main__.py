"""``python -m runtime`` is the ``trio-agents`` command."""

from __future__ import annotations

import sys

from runtime.cli import main

sys.exit(main())
