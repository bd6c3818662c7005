"""``python -m coba_verl.lab``: the CPU lab (see `coba_verl.lab.cli`)."""

import sys

from coba_verl.lab.cli import main

sys.exit(main())
