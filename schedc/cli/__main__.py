"""``python -m schedc.cli``: the same as the ``schedc`` command."""

import sys

from schedc.cli.toplevel import main

sys.exit(main())
