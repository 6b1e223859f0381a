"""What kwok does with the rehearsal's fake nodes and their pods: its configuration and Stages.

kwok v0.8.0 manages only nodes that carry :data:`NODE_ANNOTATION` (``--manage-nodes-with-annotation-selector``) and the
pods bound to them, and has no stage of its own: the binary refuses to start without one ("no stages found",
sigs.k8s.io/kwok@v0.8.0 pkg/kwok/cmd/root.go ``runE``). The Stages here (kwok.x-k8s.io/v1alpha1 ``Stage``: a selector of
jq expressions, a ``next`` status template rendered as a strategic merge patch of the status for nodes and pods,
pkg/utils/lifecycle/next.go ``computePatch``) make a node Ready once, a bound pod Running and Ready with every
container started, a pod the scenario marks with :data:`COMPLETE_ANNOTATION` Succeeded, and a pod being deleted gone.
kwok renews each node's Lease itself (:data:`NODE_LEASE_SECONDS`), so kube-controller-manager's node
lifecycle controller sees the nodes alive. What no stage does: pull images, run containers, restart them, report
resource use; a pod runs as soon as it is bound.
"""

from __future__ import annotations

from typing import Any

from efa_stack import contract

NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_ANNOTATION_VALUE = "fake"
"""The annotation kwok's documentation gives fake nodes; kwok is started to manage exactly these."""
COMPLETE_ANNOTATION = f"{contract.LABEL_PREFIX}rehearsal-complete"
"""A running pod annotated ``"true"`` finishes: every container exits 0 and the pod is Succeeded."""
STAGE_API_VERSION = "kwok.x-k8s.io/v1alpha1"
NODE_LEASE_SECONDS = 40
"""The duration of the node Leases kwok holds and renews (a kubelet's default, 40 s). kwok's own default of 40 applies
only to a configuration it defaults itself; left out, no Lease is renewed, kube-controller-manager's node lifecycle
controller finds the nodes silent after its grace period and marks their pods not Ready."""

_NOT_DELETED = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}

NODE_READY = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
phase: Running
"""

POD_RUNNING = """\
{{ $now := Now }}
conditions:
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Initialized}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: ContainersReady}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Ready}
{{ range .spec.readinessGates }}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: {{ .conditionType | Quote }}}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, started: true, restartCount: 0,
   state: {running: {startedAt: {{ $now | Quote }}}}}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, restartCount: 0,
   state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) \
( or .metadata.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""

POD_SUCCEEDED = """\
{{ $now := Now }}
conditions:
- {lastTransitionTime: {{ $now | Quote }}, status: "False", type: ContainersReady, reason: PodCompleted}
- {lastTransitionTime: {{ $now | Quote }}, status: "False", type: Ready, reason: PodCompleted}
containerStatuses:
{{ range .spec.containers }}
- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: false, started: false, restartCount: 0,
   state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}}
{{ end }}
phase: Succeeded
"""


def _stage(name: str, kind: str, expressions: list[dict[str, Any]], next_step: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": STAGE_API_VERSION, "kind": "Stage", "metadata": {"name": name},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind}, "selector": {"matchExpressions": expressions},
                 "next": next_step},
    }


def stages() -> list[dict[str, Any]]:
    """The Stages of the module docstring, in the order kwok tries them."""
    not_ready = {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status', "operator": "NotIn",
                 "values": ["True"]}
    return [
        _stage("efa-stack-node-ready", "Node", [not_ready], {"statusTemplate": NODE_READY}),
        _stage("efa-stack-pod-running", "Pod",
               [_NOT_DELETED, {"key": ".status.phase", "operator": "In", "values": ["Pending"]}, not_ready],
               {"statusTemplate": POD_RUNNING}),
        _stage("efa-stack-pod-complete", "Pod",
               [_NOT_DELETED, {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": f'.metadata.annotations["{COMPLETE_ANNOTATION}"]', "operator": "In", "values": ["true"]}],
               {"statusTemplate": POD_SUCCEEDED}),
        _stage("efa-stack-pod-delete", "Pod", [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
               {"finalizers": {"empty": True}, "delete": True}),
    ]


def flags(server_address: str, pod_cidr: str) -> list[str]:
    """kwok's options as flags: nodes by :data:`NODE_ANNOTATION`, pod addresses from ``pod_cidr``, its own HTTP server
    (health included) on ``server_address``. Flags, not a ``KwokConfiguration`` in the file: kwok applies its defaults
    (the stage parallelism among them) to the configuration it makes itself, not to one read from a file, and then
    refuses to start ("playStageParallelism must be greater than 0")."""
    return [
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={NODE_ANNOTATION}={NODE_ANNOTATION_VALUE}",
        f"--cidr={pod_cidr}",
        f"--server-address={server_address}",
        f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
        # warnings and errors only: at INFO it writes a line per Lease renewal (100 a second for 1,000 nodes)
        "--v=WARN",
    ]
