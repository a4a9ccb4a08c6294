"""``python -m compilecache``."""

import sys

from compilecache.cli import main

sys.exit(main())
