"""The cluster spec: typed models, validation, the instance catalog and the derived plan.

Everything the AWS and Kubernetes sides need is derived here, once, from one YAML file:
``spec.loader`` reads and validates it, ``spec.catalog`` knows the instance types, ``spec.layout``
derives the network interfaces and ``spec.plan`` joins them into a :class:`efa_stack.planning.plan.ClusterPlan`.
"""
