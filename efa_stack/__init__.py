"""efa-stack: EKS clusters with EFA networking from one typed cluster spec.

Sub-packages: ``spec`` (models, catalog, plan), ``policies`` (our rules and the replacement check),
``tools`` (the ``efa-stack`` command line). The CDK constructs (``aws_constructs``), stacks
(``stacks``) and cdk8s constructs (``k8s``) live beside this package.
"""
