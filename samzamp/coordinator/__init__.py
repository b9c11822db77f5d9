"""Which tasks a job has, who runs them, and what the job remembers across runs.

- the job model and its making: ``job_model`` (what a task reads), ``grouper`` (inputs into tasks,
  task order), ``container_grouper`` (tasks onto a standalone job's processors);
- the job coordinators: ``passthrough`` (one processor owns every task) and, for a standalone job,
  ``zk`` (ZooKeeper);
- who a processor is and where it runs: ``location``;
- the job's metadata store (``metadata_store``, on the coordinator stream) and what it keeps: the
  task history (``task_history``) and the run id (``run_id``).
"""
