"""``EfaStackChecks``: the project's rules as a cdk-nag ``NagPack``, run on every synth next to AwsSolutions.

Rule ids are ``EfaStack-EFA1`` … ``EfaStack-K8S2``; findings are acknowledged with
``aws_constructs.security.acknowledge(..., pack=contract.NAG_PACK_NAME)``. The pack reads each resource as
CloudFormation receives it, from the synthesized templates. How it plugs into CDK: docs/design/checks.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeAlias

import jsii
from aws_cdk import CfnResource, Stack, Stage
from cdk_nag import IApplyRule, NagMessageLevel, NagPack, NagRuleCompliance
from constructs import IConstruct

from efa_stack import contract
from efa_stack.checks import rules as R

"""cdk-nag pack name: rule ids are ``EfaStack-EFA1``; CDK acknowledgements use ``EfaStack::EfaStack-EFA1``."""

_COMPLIANCE = {
    R.Compliance.COMPLIANT: NagRuleCompliance.COMPLIANT,
    R.Compliance.NON_COMPLIANT: NagRuleCompliance.NON_COMPLIANT,
    R.Compliance.NOT_APPLICABLE: NagRuleCompliance.NOT_APPLICABLE,
}

RuleResult: TypeAlias = NagRuleCompliance | list[str]


@jsii.implements(IApplyRule)
class _Rule:
    """One application of a rule to one resource, in the shape cdk-nag's ``applyRule`` takes (jsii reads
    an interface implemented in Python through class-level properties, hence no plain attributes)."""

    def __init__(self, suffix: str, info: str, explanation: str, node: CfnResource,
                 check: Callable[[CfnResource], RuleResult]) -> None:
        self._suffix, self._info, self._explanation, self._node, self._check = suffix, info, explanation, node, check

    @property
    def rule_suffix_override(self) -> str:
        return self._suffix

    @property
    def info(self) -> str:
        return self._info

    @property
    def explanation(self) -> str:
        return self._explanation

    @property
    def level(self) -> NagMessageLevel:
        return NagMessageLevel.ERROR

    @property
    def node(self) -> CfnResource:
        return self._node

    def rule(self, node: CfnResource) -> RuleResult:
        return self._check(node)


class EfaStackChecks(NagPack):
    """EFA1–EFA4 on launch templates and security groups, K8S1–K8S2 on the kubectl handler's manifests.

    ``host_access_workloads``: the only workload names allowed host access (K8S2); default: the device
    plugins the charts render (``k8s.charts.HOST_ACCESS_WORKLOADS``).
    """

    def __init__(self, scope: IConstruct | None = None, *, verbose: bool | None = None,
                 host_access_workloads: Iterable[str] | None = None) -> None:
        super().__init__(scope, verbose=verbose)
        self._pack_name = contract.NAG_PACK_NAME
        if host_access_workloads is None:
            from k8s.charts import HOST_ACCESS_WORKLOADS

            host_access_workloads = HOST_ACCESS_WORKLOADS
        self._host_access = tuple(host_access_workloads)
        self._apps: dict[str, tuple[tuple[tuple[str, int, int], ...], R.App]] = {}

    @property
    def name(self) -> str:
        return contract.NAG_PACK_NAME

    # --- where a resource's synthesized properties are -------------------------------------------------

    def _app(self, node: CfnResource) -> R.App:
        """The synthesized templates of the node's stage, re-read when a file changes."""
        outdir = Path(Stage.of(node).outdir)
        files = sorted(outdir.glob("*.template.json"))
        key = tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files)
        cached = self._apps.get(str(outdir))
        if cached is None or cached[0] != key:
            templates = {f.name.removesuffix(".template.json"): json.loads(f.read_text()) for f in files}
            cached = (key, R.App(templates))
            self._apps[str(outdir)] = cached
        return cached[1]

    def _located(self, node: CfnResource) -> tuple[R.App, str, str, R.Resource]:
        """(app, stack, logical id, synthesized resource) of ``node``."""
        stack = Stack.of(node)
        stack_name = stack.template_file.removesuffix(".template.json")
        lid = stack.resolve(node.logical_id)
        app = self._app(node)
        template = app.templates.get(stack_name)
        if template is None or lid not in template.get("Resources", {}):
            raise LookupError(
                f"{node.node.path}: no resource {lid} in the synthesized template of {stack_name}; "
                "EfaStackChecks runs as a CDK validation plugin, after synthesis"
            )
        return app, stack_name, lid, template["Resources"][lid]

    # --- the rules -------------------------------------------------------------------------------------
    # Each is applied only to the resource types it reads (every other resource is NOT_APPLICABLE to it):
    # a call into cdk-nag's applyRule costs several jsii round trips.

    def _efa1(self, node: CfnResource) -> RuleResult:
        app, stack, _, res = self._located(node)
        return _COMPLIANCE[R.efa_interfaces_carry_efa_group(res, stack, app)]

    def _efa2(self, node: CfnResource) -> RuleResult:
        app, stack, lid, _ = self._located(node)
        return _COMPLIANCE[R.efa_group_all_traffic_only_to_itself((stack, lid), app)]

    def _efa3(self, node: CfnResource) -> RuleResult:
        return _COMPLIANCE[R.efa_launch_template_placed_or_reserved(self._located(node)[3])]

    def _efa4(self, node: CfnResource) -> RuleResult:
        return _COMPLIANCE[R.efa_nodes_get_no_public_ip(self._located(node)[3])]

    def _objects(self, node: CfnResource) -> list[dict[str, Any]]:
        return R.manifest_objects((self._located(node)[3].get("Properties") or {}).get("Manifest"))

    def _k8s1(self, node: CfnResource) -> RuleResult:
        return _COMPLIANCE[R.manifest_fits_kubectl_handler(self._objects(node))]

    def _k8s2(self, node: CfnResource) -> RuleResult:
        bad = [R.object_name(o) for o in self._objects(node) if R.host_access_is_justified(o, self._host_access) is R.N]
        return bad or NagRuleCompliance.COMPLIANT

    def _rules(self) -> dict[str, list[tuple[str, Callable[[CfnResource], RuleResult], str]]]:
        return {
            R.EC2_LAUNCH_TEMPLATE: [
                ("EFA1", self._efa1, ("put the EFA security group (aws_constructs.network.EfaSecurityGroup) on every "
                                     "efa and efa-only interface of the launch template")),
                ("EFA3", self._efa3, ("set placementGroup: true on the node group, or run it on a capacity "
                                     "reservation; an intended opt-out is acknowledged on the node group "
                                     "(aws_constructs.security.acknowledge)")),
                ("EFA4", self._efa4, "set privateNetworking: true; nodes reach the internet through NAT"),
            ],
            R.EC2_SECURITY_GROUP: [
                ("EFA2", self._efa2, ("keep only the group's self-referencing all-traffic rules and an explicit "
                                     "egress list (EfaSecurityGroup does both); use another group for other peers")),
            ],
            R.KUBERNETES_MANIFEST: [
                ("K8S1", self._k8s1, ("split the chart or shrink the object (the MPIJob CRD is kept structural "
                                     "for this)")),
                ("K8S2", self._k8s2, ("remove hostPath/hostNetwork/hostPID/hostIPC/privileged, or add the workload "
                                     "to k8s.charts.HOST_ACCESS_WORKLOADS with an efa-stack.io/host-access-reason "
                                     "annotation")),
            ],
        }

    def _check_resource(self, node: CfnResource) -> None:
        for suffix, check, fix in self._rules().get(node.cfn_resource_type, ()):
            self._apply_rule(_Rule(suffix, f"{R.MESSAGES[suffix]}. Fix: {fix}.", R.MESSAGES[suffix], node, check))

