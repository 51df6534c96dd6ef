"""The harness: config, seeds, schedule, runner phases, store, CLI and suites.
May import every kchaos package: it is the one place that wires them together.
"""
