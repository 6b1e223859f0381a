"""Operator tooling: the ``efa-stack`` command line."""
