"""The rehearsal: a plan rolled out on a local Kubernetes control plane with the real scheduler and the real
controllers at the versions efa-stack pins, on fake nodes made from the plan, so that what the cluster *does* with
the rendered objects (admission, placement, gang admission, topology) is checked before anyone pays for a GPU.

- :mod:`~efa_stack.rehearsal.binaries`: the pinned binaries, built once into ``.cache/`` by ``tools/build.sh``;
- :mod:`~efa_stack.rehearsal.control_plane`: etcd, kube-apiserver (webhooks on), kube-scheduler,
  kube-controller-manager and kwok as local processes (:mod:`~efa_stack.rehearsal.processes`,
  :mod:`~efa_stack.rehearsal.pki`, :mod:`~efa_stack.rehearsal.client`, :mod:`~efa_stack.rehearsal.kwok`);
- :mod:`~efa_stack.rehearsal.nodes`: a fake node per node-group member, every figure from the plan;
- :mod:`~efa_stack.rehearsal.controllers`: the operators efa-stack installs, as local processes under their own
  ServiceAccounts, their webhooks served the way envtest serves them (:mod:`~efa_stack.rehearsal.pods`);
- :mod:`~efa_stack.rehearsal.rollout`: the rollout graph of :mod:`k8s.rollout` performed, in ``apply.sh``'s order;
- :mod:`~efa_stack.rehearsal.rehearsal`: all of it as one ``with`` block, and jobs started by their start command.
"""
