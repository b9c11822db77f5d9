"""Which tasks a job has, who runs them, and what the job remembers across runs.

- the seam: ``job_coordinator`` (the ``JobCoordinator`` protocol and its listener, Samza's), and
  ``factory`` (the coordinator job.coordinator.factory names);
- the job coordinators: ``passthrough`` (one processor owns every task) and, for a standalone job,
  ``zk`` (ZooKeeper);
- making a job model (``samzamp.model``) for the inputs now: ``job_model_calculator``, and
  ``container_grouper`` (tasks onto a standalone job's processors);
- who a processor is and where it runs: ``location``;
- the job's metadata store (``metadata_store``, on the coordinator stream) and what it keeps: the
  task history (``task_history``) and the run id (``run_id``).
"""
