"""``python -m compilecache``."""

import sys

from compilecache.entrypoint import main

sys.exit(main())
