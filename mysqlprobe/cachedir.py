"""Where mysqlprobe keeps what it can build again: server downloads, symbol
tables, calibrations. $MYSQLPROBE_CACHE, else $XDG_CACHE_HOME/mysqlprobe,
else ~/.cache/mysqlprobe."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("MYSQLPROBE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mysqlprobe")
    return Path(base)
