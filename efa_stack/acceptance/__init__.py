"""Node acceptance: healthy nodes before a job lands on them (``efa-stack verify --acceptance``).

* :mod:`.model`: check outcomes, per-node verdicts, pair results and the ``--json`` document;
* :mod:`.checks`: the check script's sections (``check.sh``) read back and judged one by one;
* :mod:`.judge`: the single-node NVLink expectation, per-node verdicts and naming the slow node of a pair;
* :mod:`.manifests`: the per-node check pod and the 2-node NCCL-tests MPIJob, as API bodies;
* :mod:`.run`: the runner (Kubernetes API objects injected), quarantine, progress and output.
"""
