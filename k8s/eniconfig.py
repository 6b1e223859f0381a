"""VPC CNI custom networking's ENIConfig objects: one per zone, named after the zone.

With ``AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true`` and ``ENI_CONFIG_LABEL_DEF=topology.kubernetes.io/zone`` (set on the
vpc-cni add-on by the plan, efa_stack/planning/addressing.py) ipamd reads the ENIConfig named after its node's zone
and attaches the pods' ENIs in that ENIConfig's subnet with its security groups (aws/amazon-vpc-cni-k8s@v1.20.1
README.md; the kind: charts/aws-vpc-cni/crds/customresourcedefinition.yaml, ``crd.k8s.amazonaws.com/v1alpha1``
ENIConfig, cluster-scoped, ``spec.subnet`` required, ``spec.securityGroups`` a list of ids). The subnet and group ids
are CloudFormation values, so the chart is built in the cluster stack and not written to ``dist/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import cdk8s
from constructs import Construct

from efa_stack import contract


@dataclass(frozen=True)
class EniConfigProps:
    """Props of :class:`EniConfigChart`; every default is what happens when the prop is left out."""

    subnets: Mapping[str, str]
    """Zone -> id of the pod subnet there (one ENIConfig each, named after the zone)."""
    security_groups: Sequence[str] = field(default_factory=tuple)
    """Ids of the security groups of the pods' ENIs (efa-stack: the EKS cluster security group); empty: the
    field is left out and ipamd uses the primary interface's groups (README.md, AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG)."""


class EniConfigChart(cdk8s.Chart):
    """One ``ENIConfig`` per zone of ``props.subnets``."""

    def __init__(self, scope: Construct, id: str, props: EniConfigProps) -> None:
        super().__init__(scope, id)
        self.props = props
        self.objects: dict[str, cdk8s.ApiObject] = {}
        for zone, subnet in props.subnets.items():
            spec: dict[str, object] = {"subnet": subnet}
            if props.security_groups:
                spec["securityGroups"] = list(props.security_groups)
            obj = cdk8s.ApiObject(
                self, zone, api_version=contract.ENICONFIG_API_VERSION, kind=contract.ENICONFIG_KIND,
                metadata=cdk8s.ApiObjectMetadata(name=zone),
            )
            obj.add_json_patch(cdk8s.JsonPatch.add("/spec", spec))
            self.objects[zone] = obj
