"""Every test runs with the lock-order check on (``plateau.storage.catalog.locks``): an engine
lock taken out of order raises at once, in process and in node subprocesses (which
inherit the environment), whether or not that run's timing would deadlock."""

from __future__ import annotations

import os

from plateau.storage.catalog.locks import CHECK_ENV

os.environ.setdefault(CHECK_ENV, "1")
