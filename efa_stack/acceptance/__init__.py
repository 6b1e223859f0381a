"""Node acceptance: healthy nodes before a job lands on them (``efa-stack verify --acceptance``).

* :mod:`efa_stack.acceptance.model`: check outcomes, per-node verdicts, pair results and the ``--json`` document;
* :mod:`efa_stack.acceptance.checks`: the check script's sections (``check.sh``) read back and judged one by one;
* :mod:`efa_stack.acceptance.judge`: the single-node NVLink expectation, per-node verdicts and naming the slow node of a pair;
* :mod:`efa_stack.acceptance.run`: the runner (cluster access through :mod:`efa_stack.cluster`), quarantine and
  progress; it returns an :class:`efa_stack.acceptance.model.AcceptanceReport`, printed by
  :func:`efa_stack.tools.render.render_acceptance`.

The per-node check pod and the 2-node NCCL-tests MPIJob are rendered by :mod:`k8s.acceptance`.
"""
