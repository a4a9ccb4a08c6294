"""``python -m compilecache``."""

import sys

from compilecache.command import main

sys.exit(main())
