"""A Kafka broker's life on a node (configure, format, start, kill, pause) and cluster views.
Imports only infra among kchaos packages (docs/design.md, "Packages and their floors").
"""
