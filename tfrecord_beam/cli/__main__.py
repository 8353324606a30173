"""`python -m tfrecord_beam.cli`: the `tfrecord-beam` command."""

import sys

from . import main

sys.exit(main())
