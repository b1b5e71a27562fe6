"""``python -m schedc.cli``: the same as the ``schedc`` command (whose entry point is :mod:`schedc_entry`)."""

import sys

from schedc_entry import main

sys.exit(main())
