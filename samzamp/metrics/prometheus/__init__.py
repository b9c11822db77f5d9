"""The Prometheus and health endpoint (metrics.prometheus.port): the registry's metrics under
Prometheus names (``names``), read at scrape time (``collector``), served over HTTP with /healthz
(``server``).

``names`` is plain Python; ``collector`` and ``server`` import prometheus_client (the extra
``samzamp[prometheus]``), so nothing imports them unless the endpoint is on. Nothing else of
samzamp imports prometheus_client (an import-linter contract, pyproject.toml).
"""
