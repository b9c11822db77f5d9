"""How an offline job's Spark session is set up: UI and loopback by master, progress by terminal."""

from __future__ import annotations

import sys

from samzamp.offline.spark_session import session_config


def test_a_local_master_runs_on_the_loopback_interface_with_no_ui() -> None:
    conf = session_config("local[2]", terminal=False)
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.pyspark.python"] == sys.executable
    assert conf["spark.ui.showConsoleProgress"] == "false"


def test_a_cluster_master_keeps_the_spark_ui_and_the_cluster_s_own_addresses() -> None:
    conf = session_config("spark://spark-master:7077", terminal=False)
    assert conf["spark.ui.enabled"] == "true"
    assert "spark.driver.host" not in conf
    assert "spark.driver.bindAddress" not in conf


def test_on_a_terminal_spark_draws_its_own_progress_bar() -> None:
    assert session_config("local[*]", terminal=True)["spark.ui.showConsoleProgress"] == "true"
    assert session_config("spark://m:7077", terminal=True)["spark.ui.showConsoleProgress"] == "true"
