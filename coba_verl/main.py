"""``python -m coba_verl.main [overrides...]``: the veRL training command (also ``coba-verl train``).

Only the command's name lives here; what it does is `coba_verl.verl_plugin.main`.
"""

from coba_verl.verl_plugin.main import main

if __name__ == "__main__":
    main()
