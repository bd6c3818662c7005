"""The run reports: a finished run's summary and pictures, read from veRL's file logger.

`run_summary` (``coba-verl summary`` / ``python -m coba_verl.verl_plugin.reports.run_summary``),
`run_plots` (matplotlib), both reading `metrics_file`.
"""
