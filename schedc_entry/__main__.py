"""``python -m schedc_entry``: the ``schedc`` command."""

import sys

from schedc_entry import main

sys.exit(main())
