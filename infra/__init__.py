"""Nodes: one Node interface over Docker and SSH backends, the Kafka distribution, node images.
Imports no other kchaos package: it is the bottom floor (docs/design.md, "Packages and their floors").
"""
