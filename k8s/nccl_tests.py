"""The nccl-tests MPIJob: one worker per node, one rank per GPU, created suspended.

Every number comes from :class:`efa_stack.planning.nccl.NcclJobPlan`; ``ncclTest.fabric`` renders it for
``efa``, ``tcp`` or ``infiniband``. The launcher gates mpirun until every worker answers
(:func:`launcher_command`), because the operator starts it early for a job created suspended. Why, with
the sources: docs/design/kubernetes-side.md; how to run it: docs/verify.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from efa_stack.planning.nccl import WORKER_WAIT_SECONDS, NcclJobPlan
from efa_stack.planning.node_groups import ComputeDomainPlan, Taint
from efa_stack.planning.scheduling import QueueBinding
from k8s.compute_domains import channel_claim, clique_affinity, worker_claims
from k8s.dra import container_claims, pod_claims, pod_node_selector
from k8s.efa_guard import fail_closed_env, guard_init_container
from k8s.mpijob import LauncherCreationPolicy, MpiJob, MpiJobProps, MpiJobSpec, ReplicaSpec, RunPolicy
from k8s.scheduling import count, mebibytes, one_pod_per_node, system_node_selector, tolerations

START_COMMAND = (
    "kubectl patch mpijob {name} -n {namespace} --type merge "
    "-p '{{\"spec\":{{\"runPolicy\":{{\"suspend\":false}}}}}}'"
)
"""Start the suspended job (format with ``name`` and ``namespace``)."""
LOGS_COMMAND = "kubectl logs -n {namespace} -f job/{name}-launcher"
"""Follow the launcher's log, where nccl-tests prints its table (the launcher Job is ``<name>-launcher``)."""

# Where the operator mounts the hostfile in the launcher's first container and the variable that names
# it for Open MPI (mpi-operator@v0.8.2 mpi_job_controller.go: configMountPath "/etc/mpi", hostfileName
# "hostfile", OMPI_MCA_orte_default_hostfile); one line per worker, "<pod>.<job>.<ns>.svc slots=N".
HOSTFILE = "/etc/mpi/hostfile"
HOSTFILE_ENV = "OMPI_MCA_orte_default_hostfile"
GATE_NAME = "wait-for-workers"
"""``$0`` of the launcher's gate script (bash -c SCRIPT NAME mpirun ...)."""




def start_command(job: NcclJobPlan, queue: QueueBinding | None = None) -> str:
    """The command that starts the suspended job: resume it, or with Kueue put it in its queue."""
    if queue is not None and job.suspend:
        return queue.start_command("mpijob", job.name, job.namespace)
    return START_COMMAND.format(name=job.name, namespace=job.namespace)


def logs_command(job: NcclJobPlan) -> str:
    return LOGS_COMMAND.format(name=job.name, namespace=job.namespace)


@dataclass(frozen=True)
class ImageLayout:
    """Where things live in the NCCL test image. Defaults: the AWS ``hpc-cloud/nccl-tests`` image
    (awsome-distributed-training ``nccl-tests.Dockerfile``: Open MPI and libfabric from the EFA
    installer under ``/opt/amazon``, aws-ofi-nccl under ``/opt/amazon/ofi-nccl/lib/<arch>``, NCCL in
    ``/opt/nccl/build/lib``, the tests in ``/opt/nccl-tests/build``).

    The container environment replaces the image's, and processes that mpirun starts over ssh on
    the workers see only what ``-x`` exports, so PATH and LD_LIBRARY_PATH are spelled out in full.
    """

    mpirun: str = "/opt/amazon/openmpi/bin/mpirun"
    tests_dir: str = "/opt/nccl-tests/build"
    path: tuple[str, ...] = (
        "/opt/amazon/openmpi/bin", "/opt/amazon/efa/bin", "/usr/local/cuda/bin",
        "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin",
    )
    ofi_nccl_lib: str = "/opt/amazon/ofi-nccl/lib/{arch}"
    # /opt/aws-ofi-nccl/install/lib: where the default image builds aws-ofi-nccl itself
    # (awsome-distributed-training micro-benchmarks/nccl-tests/nccl-tests.Dockerfile at EFA installer
    # 1.43.2 / aws-ofi-nccl v1.16.3: ./configure --prefix=/opt/aws-ofi-nccl/install; its own ENV
    # LD_LIBRARY_PATH lists that lib directory, which the container env set here replaces).
    lib_path: tuple[str, ...] = (
        "/opt/amazon/ofi-nccl/lib/{arch}", "/opt/nccl/build/lib", "/opt/amazon/efa/lib",
        "/opt/amazon/openmpi/lib", "/usr/local/cuda/lib64", "/opt/aws-ofi-nccl/install/lib",
    )
    tuner_plugin: str = "libnccl-ofi-tuner.so"

    def ld_library_path(self, arch: str) -> str:
        return ":".join(p.format(arch=arch) for p in self.lib_path)

    def tuner_plugin_path(self, arch: str) -> str:
        return f"{self.ofi_nccl_lib.format(arch=arch)}/{self.tuner_plugin}"


@dataclass(frozen=True)
class InfinibandSettings:
    """NCCL settings for ``fabric: infiniband`` (defaults: Mellanox HCAs, RoCE v2 GID index 3)."""

    hca: str = "mlx5"
    gid_index: int = 3
    socket_ifname: str = "eth0"
    devices_per_worker: int = 1


@dataclass(frozen=True)
class NcclTestsJobProps:
    """job: the derived plan (numbers, fabric, sweep). taints: what the workers tolerate (default: their node
    group's taints, ``job.worker.taints``).
    layout / infiniband: image paths and IB settings (defaults above).
    launcher_node_selector: default the system node group.
    """

    job: NcclJobPlan
    taints: tuple[Taint, ...] | None = None
    layout: ImageLayout = ImageLayout()
    infiniband: InfinibandSettings = InfinibandSettings()
    launcher_node_selector: dict[str, str] = field(default_factory=system_node_selector, hash=False)
    backoff_limit: int = 6
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    storage_claim: str | None = None
    """A ReadWriteMany claim (the FSx for Lustre volume of the spec's ``storage``) to mount in workers."""
    storage_mount_path: str = contract.FSX_MOUNT_PATH
    worker_wait_seconds: int = WORKER_WAIT_SECONDS
    """How long the launcher waits for every worker to resolve and accept ssh before mpirun (the
    workers pull a multi-GB image on first start); past it the launcher fails with a clear message. The plan's
    job says how long its launcher waits (:attr:`efa_stack.planning.nccl.NcclJobPlan.worker_wait_seconds`: longer when
    its workers' nodes may still be launching)."""
    worker_wait_interval_seconds: int = 5
    queue: QueueBinding | None = None
    """Queue the job through Kueue (:meth:`efa_stack.planning.scheduling.KueuePlan.binding`): the queue label on
    the MPIJob, the topology annotation on the workers' pod template (the launcher stays unconstrained), and
    ``launcherCreationPolicy: AtStartup`` (see :func:`launcher_creation_policy`); None: not queued."""
    do_not_disrupt: bool = False
    """The workers run on a Karpenter pool: their pod template carries ``karpenter.sh/do-not-disrupt: "true"``, so
    Karpenter never drains a node under a running worker voluntarily (docs/design/karpenter.md)."""
    pin_nodes: tuple[str, ...] = ()
    """Node names the workers must run on (a required node affinity, ``matchFields`` on ``metadata.name``);
    empty: any node of the node group. ``efa-stack verify --acceptance`` pins a pair job to its two nodes."""

    def __post_init__(self) -> None:
        if self.worker_wait_seconds < 0 or self.worker_wait_interval_seconds < 1:
            raise ValueError(
                "worker_wait_seconds must be >= 0 and worker_wait_interval_seconds >= 1 "
                f"(got {self.worker_wait_seconds}, {self.worker_wait_interval_seconds})"
            )
        if self.pin_nodes:
            distinct = set(self.pin_nodes)
            if "" in distinct or len(distinct) != len(self.pin_nodes):
                raise ValueError(f"pin_nodes must be distinct, non-empty node names (got {list(self.pin_nodes)})")
            if len(distinct) < self.job.workers:
                # one worker per node (pod anti-affinity): fewer nodes than workers would never schedule
                raise ValueError(
                    f"pin_nodes names {len(distinct)} node(s) for {self.job.workers} workers "
                    "(one worker per node); name at least as many nodes as workers"
                )


def fabric_env(props: NcclTestsJobProps) -> list[tuple[str, str]]:
    """The environment the launcher exports to every rank, in order."""
    job, layout = props.job, props.layout
    env: list[tuple[str, str]] = [
        ("PATH", ":".join(layout.path)),
        ("LD_LIBRARY_PATH", layout.ld_library_path(job.worker.lib_arch)),
        ("NCCL_DEBUG", "INFO"),
    ]
    return env + mnnvl_env(job) + nccl_fabric_env(
        job.worker.fabric,
        gpudirect_rdma=job.worker.gpudirect_rdma,
        tuner_plugin=layout.tuner_plugin_path(job.worker.lib_arch),
        infiniband=props.infiniband,
        efa_guard=job.efa_guard,
    )


def mnnvl_env(job: NcclJobPlan) -> list[tuple[str, str]]:
    """Multi-node NVLink for a job kept in one NVLink domain through its ComputeDomain: ``NCCL_MNNVL_ENABLE=1`` and
    ``NCCL_NVLS_ENABLE=1`` (NCCL's environment variables; NVIDIA/aicr runs its GB200/GB300 NVLS check with both), so
    the all_reduce measures MNNVL and NVLS rather than a fallback; none for other jobs (EFA across domains)."""
    domain = job.compute_domain
    if domain is None or not domain.within_domain:
        return []
    return [("NCCL_MNNVL_ENABLE", "1"), ("NCCL_NVLS_ENABLE", "1")]


def nccl_fabric_env(
    fabric: str, *, gpudirect_rdma: bool, tuner_plugin: str | None, infiniband: InfinibandSettings,
    efa_guard: bool = True,
) -> list[tuple[str, str]]:
    """The NCCL/libfabric settings of ``fabric`` (efa, tcp or infiniband), in order; shared by every NCCL job.

    ``tuner_plugin``: the aws-ofi-nccl tuner's path in the image (efa only; None leaves NCCL_TUNER_PLUGIN unset).
    ``efa_guard``: with efa, name the aws-ofi-nccl network in ``NCCL_NET`` so NCCL fails instead of using
    sockets (:func:`k8s.efa_guard.fail_closed_env`); the caller runs the guard init container too.
    """
    env: list[tuple[str, str]] = []
    if fabric == "efa":
        env += [("FI_PROVIDER", "efa")]
        if efa_guard:
            # NCCL_NET names the aws-ofi-nccl network: no silent fallback to sockets (k8s/efa_guard.py)
            env += [(k, v) for k, v in fail_closed_env("efa").items() if k != "FI_PROVIDER"]
        if gpudirect_rdma:
            env += [("FI_EFA_USE_DEVICE_RDMA", "1")]
        env += [("FI_EFA_FORK_SAFE", "1")]
        if tuner_plugin is not None:
            env += [("NCCL_TUNER_PLUGIN", tuner_plugin)]
        env += [
            # the AWS nccl-tests image's defaults for EFA (nccl-tests.Dockerfile / kubernetes sample)
            ("NCCL_BUFFSIZE", "8388608"),
            ("NCCL_P2P_NET_CHUNKSIZE", "524288"),
            ("NCCL_SOCKET_IFNAME", "^docker,lo,veth"),
        ]
    elif fabric == "tcp":
        env += [
            ("NCCL_NET", fail_closed_env("tcp")["NCCL_NET"]),
            ("FI_PROVIDER", "tcp"),
            ("NCCL_SOCKET_IFNAME", "^docker,lo,veth"),
        ]
    else:  # infiniband
        ib = infiniband
        env += [
            ("NCCL_NET", fail_closed_env("infiniband")["NCCL_NET"]),
            ("NCCL_IB_DISABLE", "0"),
            ("NCCL_IB_HCA", ib.hca),
            ("NCCL_IB_GID_INDEX", str(ib.gid_index)),
            ("NCCL_SOCKET_IFNAME", ib.socket_ifname),
        ]
    return env


def mpirun_command(props: NcclTestsJobProps) -> list[str]:
    """``mpirun -np <workers x slots> -N <slots> ... <binary> -b .. -e .. -f .. -g 1 -c .. -n ..``."""
    job, layout = props.job, props.layout
    cmd = [
        layout.mpirun, "--allow-run-as-root", "--tag-output",
        # -N n: n ranks per node (Open MPI mpirun(1): a synonym for --map-by ppr:n:node), one per GPU.
        # --bind-to none: aws-ofi-nccl's guidance is to run NCCL with CPU binding off so every rank's mask
        # holds all the worker's CPUs (aws/aws-ofi-nccl wiki "CPU Binding": "--bind-to none" with Open MPI);
        # NCCL then pins its own threads to the CPUs near each rank's GPU within that mask. The mask is the
        # worker's exclusive CPUs when its node runs the static CPU manager (worker_resources).
        "-np", str(job.np), "-N", str(job.slots_per_worker),
        "--bind-to", "none",
        # MPI's own traffic over TCP (the AWS sample's settings); NCCL picks its fabric itself
        "--mca", "pml", "^cm,ucx",
        "--mca", "btl", "tcp,self",
        "--mca", "btl_tcp_if_exclude", "lo,docker0,veth_def_agent",
    ]
    for name, _ in fabric_env(props):
        cmd += ["-x", name]
    cmd.append(f"{layout.tests_dir}/{job.binary}")
    cmd += list(job.benchmark_args)
    return cmd


def wait_for_workers_script(props: NcclTestsJobProps) -> str:
    """The bash gate run before mpirun: every hostfile host must resolve and accept ssh.

    Run as ``bash -c SCRIPT wait-for-workers mpirun ...``; on success it execs its arguments.
    Uses only bash, ``getent`` and ``ssh`` (both in the image: mpirun itself starts ranks over ssh).
    """
    job = props.job
    limit, every = props.worker_wait_seconds, props.worker_wait_interval_seconds
    selector = f"{contract.LABEL_NCCL_JOB}={job.name},{contract.LABEL_MPI_ROLE}=worker"
    return "\n".join([
        "set -u",
        f'hostfile="${{{HOSTFILE_ENV}:-{HOSTFILE}}}"',
        "hosts=()",
        'while read -r host _; do [ -n "$host" ] && hosts+=("$host"); done < "$hostfile"',
        'if [ "${#hosts[@]}" -eq 0 ]; then echo "efa-stack: no workers in $hostfile" >&2; exit 1; fi',
        f"deadline=$((SECONDS + {limit}))",
        'for host in "${hosts[@]}"; do',
        (
            '  until getent hosts "$host" >/dev/null 2>&1 && ssh -n -o BatchMode=yes -o ConnectTimeout=5 '
            '-o StrictHostKeyChecking=no "$host" true >/dev/null 2>&1; do'
        ),
        '    if [ "$SECONDS" -ge "$deadline" ]; then',
        (
            f'      echo "efa-stack: worker $host did not resolve and accept ssh within {limit} s, so mpirun was '
            f'not started. Check the workers: kubectl get pods -n {job.namespace} -l {selector}" >&2'
        ),
        "      exit 1",
        "    fi",
        f"    sleep {every}",
        "  done",
        "done",
        'echo "efa-stack: all ${#hosts[@]} workers resolve and accept ssh; starting mpirun"',
        'exec "$@"',
    ])


def launcher_creation_policy(props: NcclTestsJobProps) -> LauncherCreationPolicy:
    """``WaitForWorkersReady`` unless Kueue queues the job, then ``AtStartup``. The operator evaluates
    WaitForWorkersReady only when it creates the launcher Job, which it does while the job is suspended (no workers:
    0 of 0 ready; kubeflow/mpi-operator@v0.8.2 pkg/controller/mpi_job_controller.go:678, issue #615, pull request
    #868), so for a job applied suspended (every job efa-stack renders: Kueue resumes a queued one, the start
    command an unqueued one) the launcher starts with the workers; the policy holds the launcher only for a job a
    user applies unsuspended. The launcher's own gate (:func:`wait_for_workers_script`) waits for every worker in
    every case; the rehearsal shows the launcher beside pending workers (tests/test_rehearsal.py, too few nodes)."""
    return "AtStartup" if props.queue is not None else "WaitForWorkersReady"


def launcher_command(props: NcclTestsJobProps) -> list[str]:
    """``bash -c <wait-for-workers gate> wait-for-workers <mpirun ...>`` (see the module docstring)."""
    return ["/bin/bash", "-c", wait_for_workers_script(props), GATE_NAME, *mpirun_command(props)]


def worker_annotations(props: NcclTestsJobProps) -> dict[str, str]:
    """The workers' pod template annotations: Kueue's topology annotation and, on a Karpenter pool, do-not-disrupt."""
    out = dict(props.queue.pod_annotations) if props.queue else {}
    if props.do_not_disrupt:
        out[contract.KARPENTER_DO_NOT_DISRUPT] = "true"
    return out


def worker_resources(props: NcclTestsJobProps) -> dict[str, k8s_l1.Quantity]:
    """Requests = limits for a worker: whole CPUs and memory equal in both make the pod Guaranteed QoS
    (Kubernetes docs, "Pod Quality of Service Classes"; kubernetes/kubernetes pkg/apis/core/helper/qos/qos.go
    ComputePodQOS checks init containers too, so an init container added here needs requests = limits for CPU
    and memory as well), and extended resources (GPUs, EFA, hugepages) must
    match anyway. A Guaranteed pod with an integer CPU request gets exclusive CPUs from the static CPU
    manager and topology-aligned devices (spec/tuning.py); ``cpus_per_worker`` comes from the plan."""
    job = props.job
    dra = job.worker.claims is not None  # GPUs and EFA devices come in the worker's claims (k8s/dra.py)
    res: dict[str, k8s_l1.Quantity] = {
        "cpu": count(job.worker.cpus),
        **({} if dra else {contract.GPU_RESOURCE: count(job.worker.gpus)}),
        "memory": mebibytes(job.worker.memory.memory_mib),
    }
    if job.worker.efa_devices and not dra:
        res[contract.EFA_RESOURCE] = count(job.worker.efa_devices)
    if job.worker.memory.hugepages_mib:
        res[contract.HUGEPAGES_2MI_RESOURCE] = mebibytes(job.worker.memory.hugepages_mib)
    if job.worker.fabric == "infiniband":
        res[contract.RDMA_RESOURCE] = count(props.infiniband.devices_per_worker)
    return res


def worker_init_containers(props: NcclTestsJobProps) -> list[k8s_l1.Container]:
    """The worker's init containers: the EFA guard when the job runs over EFA with ``efaGuard`` on.

    The guard requests the worker's EFA devices (device plugins allocate per container; the kubelet
    hands them on to the worker, see :mod:`k8s.efa_guard`) and checks them with the worker's own
    image and environment before sshd starts. The MPI operator keeps init containers as given
    (mpi-operator@v0.8.2 pkg/controller/mpi_job_controller.go ``newWorker``: a DeepCopy of the Worker
    template, only ``Containers[0]`` gets the sshd command).
    """
    job = props.job
    if not job.efa_guard:
        return []
    return [
        guard_init_container(
            image=job.image,
            expected_efa=job.worker.efa_devices,
            expected_gpus=job.worker.gpus,
            fabric=job.worker.fabric,
            env=fabric_env(props),
            claims=container_claims(job.worker.claims, "efa"),
        )
    ]


# Pin a pod to named nodes through the scheduler (so resources and taints are still honoured) with a node
# affinity on the node's name, as the DaemonSet controller does (kubernetes.io, "DaemonSet", "How Daemon Pods
# are scheduled": nodeAffinity with matchFields on metadata.name).
NODE_NAME_FIELD = "metadata.name"


def pin_to_nodes(nodes: tuple[str, ...]) -> k8s_l1.NodeAffinity:
    """A required node affinity: one term, ``matchFields`` ``metadata.name In nodes``."""
    return k8s_l1.NodeAffinity(
        required_during_scheduling_ignored_during_execution=k8s_l1.NodeSelector(node_selector_terms=[
            k8s_l1.NodeSelectorTerm(match_fields=[
                k8s_l1.NodeSelectorRequirement(key=NODE_NAME_FIELD, operator="In", values=list(nodes))
            ])
        ])
    )


def worker_affinity(worker_labels: dict[str, str], pin_nodes: tuple[str, ...],
                    domain: ComputeDomainPlan | None = None) -> k8s_l1.Affinity:
    """One worker per node (pod anti-affinity), with ``pin_nodes`` only on those nodes, and with a ComputeDomain that
    fits one NVLink domain all in one ``nvidia.com/gpu.clique`` (:func:`k8s.compute_domains.clique_affinity`)."""
    spread = one_pod_per_node(worker_labels)
    together = clique_affinity(domain, worker_labels)
    if not pin_nodes and together is None:
        return spread
    return k8s_l1.Affinity(node_affinity=pin_to_nodes(pin_nodes) if pin_nodes else None,
                           pod_anti_affinity=spread.pod_anti_affinity, pod_affinity=together)


class NcclTestsJob(Construct):
    """The nccl-tests MPIJob for one node group (see the module docstring)."""

    def __init__(self, scope: Construct, id: str, props: NcclTestsJobProps) -> None:
        super().__init__(scope, id)
        job = props.job
        self.props = props
        env = [k8s_l1.EnvVar(name=k, value=v) for k, v in fabric_env(props)]
        worker_labels = {contract.LABEL_NCCL_JOB: job.name, contract.LABEL_MPI_ROLE: "worker"}
        launcher_labels = {contract.LABEL_NCCL_JOB: job.name, contract.LABEL_MPI_ROLE: "launcher"}

        launcher = k8s_l1.PodTemplateSpec(
            metadata=k8s_l1.ObjectMeta(labels=launcher_labels),
            spec=k8s_l1.PodSpec(
                node_selector=dict(props.launcher_node_selector),
                containers=[
                    k8s_l1.Container(
                        name="launcher",
                        image=job.image,
                        image_pull_policy="IfNotPresent",
                        command=launcher_command(props),
                        env=env,
                        resources=k8s_l1.ResourceRequirements(
                            requests={"cpu": k8s_l1.Quantity.from_string("500m"), "memory": mebibytes(512)}
                        ),
                    )
                ],
            ),
        )
        resources = worker_resources(props)
        security = (
            k8s_l1.SecurityContext(capabilities=k8s_l1.Capabilities(add=["IPC_LOCK"]))
            if job.worker.fabric == "infiniband" else None
        )
        worker = k8s_l1.PodTemplateSpec(
            metadata=k8s_l1.ObjectMeta(
                labels=worker_labels, annotations=worker_annotations(props) or None,
            ),
            spec=k8s_l1.PodSpec(
                node_selector={contract.LABEL_NODE_GROUP: job.node_group, **pod_node_selector(job.worker.claims)},
                tolerations=tolerations(job.worker.taints if props.taints is None else props.taints) or None,
                affinity=worker_affinity(worker_labels, props.pin_nodes, job.compute_domain),
                resource_claims=[*pod_claims(job.worker.claims), *worker_claims(job.compute_domain)] or None,
                init_containers=worker_init_containers(props) or None,
                containers=[
                    # No command: the operator starts sshd (/usr/sbin/sshd -De) for mpirun to reach.
                    k8s_l1.Container(
                        name="worker",
                        image=job.image,
                        image_pull_policy="IfNotPresent",
                        env=env,
                        resources=k8s_l1.ResourceRequirements(
                            limits=resources, requests=resources,
                            claims=[*container_claims(job.worker.claims), *channel_claim(job.compute_domain)] or None,
                        ),
                        security_context=security,
                        volume_mounts=[k8s_l1.VolumeMount(name="dshm", mount_path="/dev/shm")]
                        + (
                            [k8s_l1.VolumeMount(name="fsx", mount_path=props.storage_mount_path)]
                            if props.storage_claim
                            else []
                        ),
                    )
                ],
                volumes=[
                    k8s_l1.Volume(
                        name="dshm",
                        empty_dir=k8s_l1.EmptyDirVolumeSource(medium="Memory", size_limit=mebibytes(job.worker.memory.shm_mib)),
                    )
                ]
                + (
                    [
                        k8s_l1.Volume(
                            name="fsx",
                            persistent_volume_claim=k8s_l1.PersistentVolumeClaimVolumeSource(
                                claim_name=props.storage_claim
                            ),
                        )
                    ]
                    if props.storage_claim
                    else []
                ),
            ),
        )
        self.spec = MpiJobSpec(
            slots_per_worker=job.slots_per_worker,
            launcher_creation_policy=launcher_creation_policy(props),
            mpi_implementation="OpenMPI",
            run_policy=RunPolicy(
                clean_pod_policy="Running", suspend=job.suspend, backoff_limit=props.backoff_limit
            ),
            launcher=ReplicaSpec(replicas=1, restart_policy="OnFailure", template=launcher),
            worker=ReplicaSpec(replicas=job.workers, restart_policy="Never", template=worker),
        )
        queue_labels, queue_annotations = props.queue.job_metadata(job.suspend) if props.queue else ({}, {})
        self.mpijob = MpiJob(self, "MpiJob", MpiJobProps(
            name=job.name,
            namespace=job.namespace,
            spec=self.spec,
            labels={"app.kubernetes.io/name": "nccl-tests", contract.LABEL_NODE_GROUP: job.node_group, **props.labels,
                    **queue_labels},
            annotations={contract.ANNOTATION_START: start_command(job, props.queue),
                         contract.ANNOTATION_LOGS: logs_command(job), **queue_annotations},
        ))
