"""Standalone mode's ZooKeeper parts.

- the job coordinator (``job_coordinator``, Samza's ZkJobCoordinator; ``factory`` makes it, lazily
  importing kazoo) and what it works with: the
  live processors (``registry``), the published job models (``job_models``) and each version's
  barrier (``barrier``);
- the job's metadata store on ZooKeeper (``metadata_store``) and the run shared by its processors,
  with the drain notifications (``runs``);
- underneath: the znode layout (``keys``), values of any size on a znode (``values``), the client
  connection (``client``) and the errors (``errors``);
- dev tooling: the embedded server (``server``, run by ``samzamp-zookeeper`` and the tests).

The only package that imports kazoo. Nothing is imported here, so ``server`` (which needs Java and the
pyspark jars, not kazoo) loads without the zookeeper extra.
"""
