"""``python -m coba_verl.data``: see :mod:`coba_verl.data.cli`."""

from coba_verl.data.cli import main

raise SystemExit(main(prog="python -m coba_verl.data"))
