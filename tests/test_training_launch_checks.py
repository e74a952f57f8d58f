"""The checks at launch (routing_grpo.training.launch_checks): the process-count warning reads the simple launchers'
environment."""

from __future__ import annotations

from routing_grpo.training import launch_checks


def test_process_count_warning_reads_the_simple_launchers_environment():
    simple = {"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    argv = ["accelerate", "launch", "--config_file", "cpu.yaml", "--num_processes", "2", "-m", "x"]
    line = launch_checks.process_count_warning(simple, 1, argv)
    assert line is not None and "asked for 2 processes but runs 1" in line and "--multi_gpu" in line
    assert "several processes" in launch_checks.process_count_warning(simple, 1, [])
    # torch's launcher (--multi_gpu) sets WORLD_SIZE; one process asked for sets no MASTER_PORT.
    assert launch_checks.process_count_warning({**simple, "WORLD_SIZE": "2"}, 2, argv) is None
    assert launch_checks.process_count_warning({"ACCELERATE_USE_CPU": "True"}, 1, []) is None
    assert launch_checks.process_count_warning({}, 1, argv) is None
    assert launch_checks.asked_processes(["--num_processes=4"]) == 4
