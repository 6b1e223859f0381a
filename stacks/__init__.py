"""The CDK side of one cluster plan: :func:`stacks.compose.build` adds the cluster stack (network, EKS cluster,
node groups, Kubernetes rollout, storage) to an app; each module maps the plan to the props of ``aws_constructs``."""
