"""efa-stack: EKS clusters with EFA networking from one typed cluster spec.

Sub-packages: ``spec`` (what the user writes), ``planning`` (everything derived from it), ``checks``
(our cdk-nag rules and the replacement check), ``tools`` (the ``efa-stack`` command line), ``acceptance``
and ``nccl_report``. The CDK constructs (``aws_constructs``), stacks (``stacks``) and cdk8s constructs
(``k8s``) live beside this package; docs/ explains them.
"""
