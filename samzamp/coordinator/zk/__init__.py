"""Standalone mode's ZooKeeper parts: the embedded server (``server``), the client connection
(``client``), the znode layout (``keys``), large values on znodes (``values``) and the metadata store
on them (``metadata_store``).

The only package that imports kazoo. Nothing is imported here, so ``server`` (which needs Java and the
pyspark jars, not kazoo) loads without the zookeeper extra.
"""
