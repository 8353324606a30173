"""`python -m tfrecord_beam`: the `tfrecord-beam` command."""

import sys

from .cli import main

sys.exit(main())
