"""Every name that crosses into Kubernetes or AWS, derived from the spec in one place and checked.

Each derivation here is the only one in the project; each :class:`NameRule` is the target system's own rule,
with its source in a comment beside it. :func:`node_group_problems`, :func:`cluster_problems` and
:func:`nccl_job_problems` turn a name that cannot be valid into a :class:`Problem` naming the field, the
value, the rule and the fix. The table of names: docs/design/names.md.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from efa_stack import contract
from efa_stack.spec.errors import Problem


@dataclass(frozen=True)
class NameRule:
    """One target system's rule for a name: a full-match pattern and a length range (characters)."""

    target: str
    pattern: str
    min_len: int
    max_len: int
    text: str
    """The rule in words, as the error shows it."""

    def violation(self, value: str) -> str | None:
        """Why ``value`` breaks the rule, or None when it satisfies it."""
        if len(value) < self.min_len:
            return f"{self.target} must have at least {self.min_len} character{'s' if self.min_len > 1 else ''}"
        if len(value) > self.max_len:
            return f"{self.target} must be at most {self.max_len} characters ({len(value)} given)"
        if not re.fullmatch(self.pattern, value):
            return f"{self.target}: {self.text}"
        return None

    def ok(self, value: str) -> bool:
        return self.violation(value) is None


# --- Kubernetes ------------------------------------------------------------------------------------
# k8s.io/apimachinery@v0.35.7 pkg/api/validate/content/dns.go (re-exported by pkg/util/validation):
# dns1123LabelFmt "[a-z0-9]([-a-z0-9]*[a-z0-9])?", DNS1123LabelMaxLength 63; a subdomain is dot-joined
# labels, DNS1123SubdomainMaxLength 253; dns1035LabelFmt "[a-z]([-a-z0-9]*[a-z0-9])?", max 63.
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = NameRule(
    "a Kubernetes DNS-1123 label", _DNS1123_LABEL, 1, 63,
    "lowercase letters, digits and '-', starting and ending with a letter or digit",
)
DNS1123_SUBDOMAIN = NameRule(
    "a Kubernetes DNS-1123 subdomain", rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*", 1, 253,
    "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
)
DNS1035_LABEL = NameRule(
    "a Kubernetes DNS-1035 label", r"[a-z]([-a-z0-9]*[a-z0-9])?", 1, 63,
    "lowercase letters, digits and '-', starting with a letter and ending with a letter or digit",
)
# k8s.io/apimachinery@v0.35.7 pkg/api/validate/content/kube.go: labelKeyFmt
# "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]" (name part of a key, max 63, after an optional
# DNS-1123-subdomain prefix and '/'); labelValueFmt is the same pattern made optional, max 63.
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_NAME = NameRule(
    "the name part of a Kubernetes label key", _LABEL_NAME, 1, 63,
    "letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
)
LABEL_VALUE = NameRule(
    "a Kubernetes label value", rf"({_LABEL_NAME})?", 0, 63,
    "empty, or letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
)
# k8s.io/kubernetes pkg/apis/core/validation validateNodeTaints: the key is a qualified name (the
# label-key syntax), the value a label value, the effect NoSchedule, PreferNoSchedule or NoExecute.

# --- EKS (botocore 1.44.5 data/eks/2017-11-01/service-2.json, the API model AWS publishes) ---------
# ClusterName: min 1, max 100, pattern ^[0-9A-Za-z][A-Za-z0-9\-_]* (CreateCluster "name").
EKS_CLUSTER_NAME = NameRule(
    "an EKS cluster name", r"[0-9A-Za-z][A-Za-z0-9\-_]*", 1, 100,
    "letters, digits, '-' and '_', starting with a letter or digit",
)
# CreateNodegroup nodegroupName carries no pattern in the model; the EKS API allows at most 63
# characters, starting with a letter or digit, then letters, digits, '-' and '_'
# (terraform-provider-aws docs, aws_eks_node_group.node_group_name, which quotes the API's rule).
EKS_NODEGROUP_NAME = NameRule(
    "an EKS node group name", r"[0-9A-Za-z][A-Za-z0-9\-_]*", 1, 63,
    "letters, digits, '-' and '_', starting with a letter or digit",
)
# labelKey min 1 max 63, labelValue min 1 max 63, taintKey min 1 max 63, taintValue min 0 max 63
# (shapes labelKey/labelValue/taintKey/taintValue): tighter than Kubernetes for prefixed keys and for
# empty values, and EKS rejects the node group at deploy otherwise.
EKS_LABEL_KEY_MAX = 63
EKS_LABEL_VALUE_MIN = 1
EKS_TAINT_KEY_MAX = 63

# --- CloudFormation ----------------------------------------------------------------------------------
# CreateStack StackName (botocore data/cloudformation/2010-05-15): "can contain only alphanumeric
# characters (case sensitive) and hyphens. It must start with an alphabetical character and can't be
# longer than 128 characters."
CFN_STACK_NAME = NameRule(
    "a CloudFormation stack name", r"[a-zA-Z][-a-zA-Z0-9]*", 1, 128,
    "letters, digits and '-', starting with a letter",
)

# --- IAM, EC2 ------------------------------------------------------------------------------------------
# IAM CreateRole RoleName (botocore data/iam/2010-05-08, roleNameType): min 1, max 64, [\w+=,.@-]+.
IAM_ROLE_NAME = NameRule(
    "an IAM role name", r"[A-Za-z0-9_+=,.@-]+", 1, 64, "letters, digits and any of _+=,.@-",
)
# EC2 LaunchTemplateName (botocore data/ec2/2016-11-15): min 3, max 128, [a-zA-Z0-9\(\)\.\-/_]+.
LAUNCH_TEMPLATE_NAME = NameRule(
    "an EC2 launch template name", r"[a-zA-Z0-9().\-/_]+", 3, 128, "letters, digits and any of ().-/_",
)
# EC2 CreatePlacementGroup GroupName (same model): "Up to 255 ASCII characters".
PLACEMENT_GROUP_NAME = NameRule(
    "an EC2 placement group name", r"[\x20-\x7e]+", 1, 255, "printable ASCII characters",
)

# --- AWS tags ------------------------------------------------------------------------------------------
# EKS TagKey 1..128, TagValue 0..256, and its TagMap documentation: "Do not use aws:, AWS:, or any
# upper or lowercase combination of such as a prefix for either keys or values as it is reserved for
# Amazon Web Services use." Tags reach IAM roles (CDK tags every taggable resource of the stacks),
# whose tagKeyType/tagValueType allow only [\p{L}\p{Z}\p{N}_.:/=+\-@]; CloudFormation stack tags
# (CreateStack Tags, TagValue min 1) take no empty value.
TAG_KEY_MAX = 128
TAG_VALUE_MAX = 256
TAG_RESERVED_PREFIX = "aws:"
TAG_PUNCTUATION = frozenset("_.:/=+-@")


def _tag_chars_ok(text: str) -> bool:
    return all(c in TAG_PUNCTUATION or unicodedata.category(c)[0] in "LZN" for c in text)


# --- Derivations -----------------------------------------------------------------------------------------
STACK_SUFFIXES = ("cluster",)
"""The app's one stack per cluster, ``<name>-cluster`` (stacks/compose.py)."""
MPI_WORKER_SUFFIX = "-worker-"
MPI_LAUNCHER_SUFFIX = "-launcher"


def stack_name(cluster: str, part: str) -> str:
    """The CloudFormation stack ``<cluster>-cluster``."""
    if part not in STACK_SUFFIXES:
        raise ValueError(f"unknown stack {part!r}; one of {', '.join(STACK_SUFFIXES)}")
    return f"{cluster}-{part}"


def eks_cluster_name(cluster: str) -> str:
    """The EKS cluster carries the spec's ``metadata.name`` unchanged (as eksctl does)."""
    return cluster


def eks_nodegroup_name(node_group: str) -> str:
    """The EKS managed node group carries the spec's name, so ``aws eks list-nodegroups`` shows it."""
    return node_group


def eks_nodegroup_part_name(node_group: str, index: int) -> str:
    """Part ``index`` (1, 2, ...) of a spec node group split over several EKS node groups: ``<name>-<index>``
    (:attr:`efa_stack.planning.node_groups.NodeGroupPlan.parts`); checked against :data:`EKS_NODEGROUP_NAME`
    where the plan is made."""
    return f"{eks_nodegroup_name(node_group)}-{index}"


def node_group_label_value(node_group: str) -> str:
    """The value of the ``efa-stack.io/node-group`` label (and tag) on the group's nodes."""
    return node_group


NCCL_MAX_WORKER_INDEX = 449
"""The largest worker index a NCCL-tests job can have: EKS's 450 nodes per managed node group, less one."""


def nccl_job_name(node_group: str) -> str:
    """The NCCL-tests MPIJob of ``node_group``: ``nccl-tests-<node group>``, lowercased.

    Object names are lowercase DNS names; a node group ``P5`` gets the job ``nccl-tests-p5``. The MPI operator
    derives ``<job>-worker-<index>`` from it, a DNS-1035 label of at most 63 characters: a node group name
    too long for the largest index (node group names may have 63 characters, for eksctl and EKS) is cut and
    given a digest of the whole name, as :func:`acceptance_pair_job_name` does, so the name does not depend
    on the number of workers and two long names never share a job.
    """
    room = DNS1035_LABEL.max_len - len(mpi_worker_pod_name(contract.NCCL_JOB_PREFIX, NCCL_MAX_WORKER_INDEX))
    group = node_group.lower()
    if len(group) > room:
        digest = hashlib.sha256(node_group.encode()).hexdigest()[:6]
        group = f"{group[: room - len(digest) - 1].rstrip('-')}-{digest}"
    return f"{contract.NCCL_JOB_PREFIX}{group}"


def mpi_worker_pod_name(job: str, index: int) -> str:
    """The MPI operator's worker pod ``<job>-worker-<index>``
    (kubeflow/mpi-operator@v0.8.2 pkg/controller/mpi_job_controller.go, workerSuffix)."""
    return f"{job}{MPI_WORKER_SUFFIX}{index}"


def mpi_launcher_job_name(job: str) -> str:
    """The MPI operator's launcher Job ``<job>-launcher`` (same file, launcherSuffix)."""
    return f"{job}{MPI_LAUNCHER_SUFFIX}"


COMPUTE_DOMAIN_CHANNEL_SUFFIX = "-channel"


def compute_domain_channel_name(job: str) -> str:
    """The ``ResourceClaimTemplate`` the NVIDIA DRA driver creates for the ComputeDomain of ``job`` (its
    ``spec.channel.resourceClaimTemplate.name``): ``<job>-channel``, a DNS-1123 subdomain as every object name (job
    names are DNS labels of at most 63 characters, so the suffix always fits the subdomain's 253)."""
    name = f"{job}{COMPUTE_DOMAIN_CHANNEL_SUFFIX}"
    problem = DNS1123_SUBDOMAIN.violation(name)
    if problem is not None:
        raise ValueError(f"ComputeDomain channel template {name!r}: {problem}")
    return name


ACCEPTANCE_JOB_PREFIX = "accept-"


def acceptance_pair_job_name(node_group: str, round_no: int, index: int) -> str:
    """The 2-node MPIJob of ``verify --acceptance``: ``accept-<node group>-r<round>-<index>``, lowercased.

    The MPI operator derives ``<job>-launcher`` and ``<job>-worker-1`` from it, each a DNS-1035 label of at
    most 63 characters (see :func:`nccl_job_problems`); a node group name too long for that is cut and
    given a digest of the whole name, so two long names never share a job name.
    """
    tail = f"-r{round_no}-{index}"
    longest_suffix = max(len(MPI_LAUNCHER_SUFFIX), len(mpi_worker_pod_name("", 1)))
    room = DNS1035_LABEL.max_len - longest_suffix - len(ACCEPTANCE_JOB_PREFIX) - len(tail)
    group = node_group.lower()
    if len(group) > room:
        digest = hashlib.sha256(node_group.encode()).hexdigest()[:6]
        group = f"{group[: room - len(digest) - 1].rstrip('-')}-{digest}"
    return f"{ACCEPTANCE_JOB_PREFIX}{group}{tail}"


# --- Checks -------------------------------------------------------------------------------------------------


def label_key_violation(key: str, *, eks: bool = True) -> str | None:
    """Why ``key`` is not a valid node label (or taint) key; Kubernetes' syntax plus EKS's length."""
    parts = key.split("/")
    if len(parts) > 2:
        return "a label key has at most one '/', between an optional DNS-subdomain prefix and the name"
    if len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return "the prefix before '/' is empty"
        why = DNS1123_SUBDOMAIN.violation(prefix)
        if why:
            return f"the prefix {prefix!r} is not {why.removeprefix('a ')}"
    else:
        name = parts[0]
    why = LABEL_NAME.violation(name)
    if why:
        return why
    if eks and len(key) > EKS_LABEL_KEY_MAX:
        return f"EKS allows node label and taint keys of at most {EKS_LABEL_KEY_MAX} characters ({len(key)} given)"
    return None


def label_value_violation(value: str, *, eks: bool = True) -> str | None:
    why = LABEL_VALUE.violation(value)
    if why:
        return why
    if eks and len(value) < EKS_LABEL_VALUE_MIN:
        return "EKS does not accept an empty node label value"
    return None


def tag_violation(key: str, value: str, *, stack_tag: bool = False) -> str | None:
    """Why ``key: value`` is not a valid AWS tag, or None."""
    if not key or len(key) > TAG_KEY_MAX:
        return f"tag keys have 1 to {TAG_KEY_MAX} characters ({len(key)} given)"
    if len(value) > TAG_VALUE_MAX:
        return f"tag values have at most {TAG_VALUE_MAX} characters ({len(value)} given)"
    for what, text in (("key", key), ("value", value)):
        if text.lower().startswith(TAG_RESERVED_PREFIX):
            return f"the tag {what} starts with '{text[:4]}', a prefix AWS reserves for its own tags"
        if not _tag_chars_ok(text):
            return f"the tag {what} may hold only letters, digits, spaces and _.:/=+-@"
    if stack_tag and not value:
        return "CloudFormation stack tags need a value"
    return None


def _check_labels(prefix: str, labels: Mapping[str, str], problems: list[Problem]) -> None:
    for key, value in labels.items():
        why = label_key_violation(key)
        if why:
            problems.append(Problem(
                f"{prefix}.labels", key, f"invalid label key: {why}",
                "use a key such as example.com/team or team (letters, digits, '-', '_', '.'; at most 63 characters)",
            ))
        why = label_value_violation(value)
        if why:
            problems.append(Problem(
                f"{prefix}.labels[{key!r}]", value, f"invalid label value: {why}",
                "use 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            ))


def _check_taints(prefix: str, taints: Sequence[tuple[str, str, str]], problems: list[Problem]) -> None:
    for i, (key, value, effect) in enumerate(taints):
        why = label_key_violation(key)
        if why:
            problems.append(Problem(
                f"{prefix}.taints[{i}].key", key, f"invalid taint key: {why}",
                "use a key such as example.com/dedicated (letters, digits, '-', '_', '.'; at most 63 characters)",
            ))
        why = label_value_violation(value, eks=False)
        if why:
            problems.append(Problem(
                f"{prefix}.taints[{i}].value", value, f"invalid taint value: {why}",
                "use up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            ))
        if effect not in contract.TAINT_EFFECTS:
            problems.append(Problem(
                f"{prefix}.taints[{i}].effect", effect, "not a Kubernetes taint effect",
                f"use one of {', '.join(contract.TAINT_EFFECTS)}",
            ))


def _check_tags(prefix: str, tags: Mapping[str, str], problems: list[Problem], *, stack_tags: bool) -> None:
    for key, value in tags.items():
        why = tag_violation(key, value, stack_tag=stack_tags)
        if why:
            problems.append(Problem(
                f"{prefix}.tags", {key: value}, f"invalid AWS tag: {why}",
                "use a key of 1-128 and a value of up to 256 letters, digits, spaces or _.:/=+-@, "
                "neither starting with 'aws:'" + ("; give the tag a value" if stack_tags else ""),
            ))


def node_group_problems(prefix: str, name: str, labels: Mapping[str, str],
                        taints: Sequence[tuple[str, str, str]], tags: Mapping[str, str]) -> list[Problem]:
    """The name, labels, taints and tags of one node group against EKS, Kubernetes and AWS tag rules."""
    problems: list[Problem] = []
    for rule, derived in (
        (EKS_NODEGROUP_NAME, eks_nodegroup_name(name)),
        (LABEL_VALUE, node_group_label_value(name)),
    ):
        why = rule.violation(derived)
        if why:
            problems.append(Problem(
                f"{prefix}.name", name, why, "use 1 to 63 letters, digits and '-', starting with a letter",
            ))
    _check_labels(prefix, labels, problems)
    _check_taints(prefix, taints, problems)
    _check_tags(prefix, tags, problems, stack_tags=False)
    return problems


def cluster_problems(name: str, tags: Mapping[str, str]) -> list[Problem]:
    """``metadata.name`` as every stack name and the EKS cluster name, and ``metadata.tags``."""
    problems: list[Problem] = []
    derived: list[tuple[NameRule, str]] = [(EKS_CLUSTER_NAME, eks_cluster_name(name))]
    derived += [(CFN_STACK_NAME, stack_name(name, part)) for part in STACK_SUFFIXES]
    for rule, value in derived:
        why = rule.violation(value)
        if why:
            longest = max(len(p) for p in STACK_SUFFIXES) + 1
            problems.append(Problem(
                "metadata.name", name, f"{why} (derived name {value!r})",
                f"use 1 to {min(EKS_CLUSTER_NAME.max_len, CFN_STACK_NAME.max_len - longest)} letters, digits "
                "and '-', starting with a letter",
            ))
            break
    _check_tags("metadata", tags, problems, stack_tags=True)
    return problems


def nccl_job_problems(node_group: str, workers: int) -> list[Problem]:
    """The NCCL-tests MPIJob of ``node_group`` with ``workers`` workers, against the MPI operator.

    kubeflow/mpi-operator@v0.8.2 pkg/apis/kubeflow/validation/validation.go (validateMPIJobName)
    rejects a job whose last worker's hostname ``<job>-worker-<replicas-1>`` is not a DNS-1035 label;
    the launcher Job ``<job>-launcher`` must be at most 63 characters too (kubernetes.io, "Jobs":
    "Even when the name is a DNS subdomain, the name must be no longer than 63 characters").
    """
    job = nccl_job_name(node_group)
    checks: list[tuple[NameRule, str]] = [
        (DNS1123_SUBDOMAIN, job),
        (DNS1035_LABEL, mpi_worker_pod_name(job, max(workers, 1) - 1)),
        (DNS1035_LABEL, mpi_launcher_job_name(job)),
    ]
    for rule, value in checks:
        why = rule.violation(value)
        if why:
            room = DNS1035_LABEL.max_len - len(mpi_worker_pod_name(contract.NCCL_JOB_PREFIX, max(workers, 1) - 1))
            return [Problem(
                "ncclTest.nodeGroup", node_group,
                f"the NCCL-tests MPIJob would make {value!r}, which is not {why.removeprefix('a ')}",
                f"shorten the node group's name to at most {room} characters",
            )]
    return []


def all_names(
    cluster: str, node_groups: Sequence[str], nccl_target: tuple[str, int] | None = None,
) -> list[tuple[NameRule, str]]:
    """Every (rule, derived name) pair for a cluster and its node groups (and the NCCL-tests job's node group
    and worker count): what the name tests check by property."""
    pairs: list[tuple[NameRule, str]] = [(EKS_CLUSTER_NAME, eks_cluster_name(cluster))]
    pairs += [(CFN_STACK_NAME, stack_name(cluster, p)) for p in STACK_SUFFIXES]
    for ng in node_groups:
        pairs.append((EKS_NODEGROUP_NAME, eks_nodegroup_name(ng)))
        pairs.append((LABEL_VALUE, node_group_label_value(ng)))
    if nccl_target is not None:
        node_group, workers = nccl_target
        job = nccl_job_name(node_group)
        pairs.append((DNS1123_SUBDOMAIN, job))
        pairs += [(DNS1035_LABEL, mpi_worker_pod_name(job, i)) for i in range(workers)]
        pairs.append((DNS1035_LABEL, mpi_launcher_job_name(job)))
    return pairs



# --- CloudWatch ------------------------------------------------------------------------------------------
# CloudWatch API Reference, PutDashboard DashboardName: "The maximum length is 255, and valid characters are
# A-Z, a-z, 0-9, "-", and "_"". Dashboards are global to an account (PutDashboard: "All dashboards in your
# account are global, not region-specific"), so the name carries the region as well as the cluster.
CLOUDWATCH_DASHBOARD_NAME = NameRule(
    "a CloudWatch dashboard name", r"[A-Za-z0-9_\-]+", 1, 255, "letters, digits, '-' and '_'",
)


def cloudwatch_dashboard_name(cluster: str, region: str) -> str:
    """The GPU/EFA dashboard ``<cluster>-<region>-accelerators``."""
    return f"{cluster}-{region}-accelerators"


# --- ECR ---------------------------------------------------------------------------------------------------
# AWS::ECR::PullThroughCacheRule EcrRepositoryPrefix (CloudFormation Template Reference; ECR API Reference,
# CreatePullThroughCacheRule ecrRepositoryPrefix): 2 to 30 characters,
# (?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*. Rules are per registry (account and region), so
# the prefix carries the cluster: two clusters of one account never share or fight over a rule.
ECR_CACHE_PREFIX = NameRule(
    "an ECR pull through cache repository prefix", r"(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*",
    2, 30, "lowercase letters and digits in '/'-separated parts, each part joined by single '.', '_' or '-'",
)


def ecr_cache_prefix(cluster: str, upstream: str) -> str:
    """The repository prefix of the cluster's pull through cache rule for ``upstream`` (``ecr-public``):
    ``<cluster>/<upstream>``, the cluster lowercased; a name too long for 30 characters keeps its start and gets 6
    characters of its SHA-256, so that two clusters still get two prefixes."""
    slug = re.sub(r"[^a-z0-9]+", "-", cluster.lower()).strip("-") or "cluster"
    room = ECR_CACHE_PREFIX.max_len - len(upstream) - 1
    if len(slug) > room:
        digest = hashlib.sha256(cluster.encode()).hexdigest()[:6]
        slug = f"{slug[:room - len(digest) - 1].rstrip('-')}-{digest}"
    return f"{slug}/{upstream}"
