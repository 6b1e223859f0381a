"""The cluster spec as the user writes it: typed models, reading and validation, the published schema.

:mod:`efa_stack.spec.loader` reads and validates a file into :class:`efa_stack.spec.models.ClusterSpec`;
everything derived from it (catalog, layouts, the plan) is in ``efa_stack.planning``.
"""
