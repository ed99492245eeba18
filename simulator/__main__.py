"""``python -m simulator --host 127.0.0.1 --port 8055``: run the remote-services simulator."""

from __future__ import annotations

import sys

from simulator.server import main

if __name__ == "__main__":
    sys.exit(main())
