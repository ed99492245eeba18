from __future__ import annotations

import sys

from soak.run import main

sys.exit(main())
