"""A new user's first commands: the GPU make targets on a machine without a GPU, `make install` on an
environment made for the other machine, the Slurm script's launch, and README's own-data CPU command."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from routing_grpo import train
from tests.helpers import REPO_ROOT, offline_env

GPU_TARGETS = [
    ["train-baselines", "SEEDS=0", "BASELINES=long", "NUM_PROCESSES=1"],
    ["train-router"],
    ["train-countdown"],
    ["install-gpu"],
    ["gpu-check"],
    ["eval"],
    ["oracle"],
]


def fake_nvidia_smi(folder: Path, gpus: int) -> dict[str, str]:
    """An environment whose ``nvidia-smi`` lists ``gpus`` GPUs (0: fails as it does with no driver)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    if gpus:
        lines = "".join(f"echo 'GPU {i}: NVIDIA H100 (UUID: GPU-{i})'\n" for i in range(gpus))
        script.write_text(f"#!/bin/sh\n{lines}")
    else:
        script.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed: no NVIDIA driver' >&2\nexit 9\n")
    script.chmod(0o755)
    # a make of its own, not a sub-make of the one running the tests (`make test-all`)
    env = {
        k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")
    }
    return {**env, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def make(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO_ROOT), *args],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("goal", GPU_TARGETS, ids=lambda g: g[0])
def test_a_gpu_target_without_a_gpu_refuses_in_one_line_and_installs_nothing(tmp_path, goal):
    venv = tmp_path / "venv"
    done = make(*goal, f"VENV={venv}", env=fake_nvidia_smi(tmp_path / "bin", gpus=0))
    assert done.returncode != 0
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert f"make {goal[0]}: needs an NVIDIA GPU" in line and "nothing was installed" in line
    assert "make demo" in line and "recipes/demo_smollm2_cpu.yaml" in line
    assert not venv.exists()


def plan(venv: Path, env: dict[str, str]) -> str:
    """What `make install` would run (make -n) for the environment ``venv``."""
    done = make("-n", "install", f"VENV={venv}", env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    "stamp, gpu_extra, gpus, remade",
    [
        ("gpu", False, 0, True),  # made on a GPU machine, used on a CPU one
        ("", True, 0, True),  # the GPU extra installed into an environment on a CPU machine
        ("cpu", False, 2, True),  # made on a CPU machine, used on a GPU one
        ("cpu", False, 0, False),
        ("gpu", False, 2, False),
    ],
)
def test_make_install_makes_an_environment_for_the_other_machine_again(
    tmp_path, stamp, gpu_extra, gpus, remade
):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").write_text(f"{stamp}\n" if stamp else "")
    if gpu_extra:
        (venv / ".installed-gpu").touch()
    commands = plan(venv, fake_nvidia_smi(tmp_path / "bin", gpus))
    flavour = "gpu" if gpus else "cpu"
    if remade:
        assert f"-m venv --clear {venv}" in commands
        assert f"-c constraints-{flavour}.txt" in commands
        assert f"echo {flavour} > {venv}/.installed" in commands
    else:
        assert commands.startswith("make: Nothing to be done"), commands


def test_make_install_records_the_machine_it_installed_for(tmp_path):
    commands = plan(tmp_path / "venv", fake_nvidia_smi(tmp_path / "bin", gpus=0))
    assert "--clear" not in commands and f"echo cpu > {tmp_path}/venv/.installed" in commands


def test_the_slurm_script_launches_the_recipe_with_accelerate_on_every_node(tmp_path, monkeypatch):
    """slurm/train.slurm under stand-ins for srun, scontrol and accelerate: the training command it starts is
    the entry point's, with the geometry of the allocation, and parses as the entry point's arguments."""
    bin_ = tmp_path / "bin"
    env = fake_nvidia_smi(bin_, gpus=4)
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "activate").write_text(f'PATH="{venv_bin}:$PATH"\n')
    launched = tmp_path / "launched"
    stand_ins = {
        bin_ / "scontrol": "echo node-a; echo node-b",
        # one task per node: run the command as node 0 and node 1 would
        bin_ / "srun": 'while [ "${1#--}" != "$1" ]; do shift; done\n'
        'SLURM_PROCID=0 "$@" && SLURM_PROCID=1 "$@"',
        venv_bin / "accelerate": f'printf "%s\\n" "$@" >> {launched}; echo >> {launched}',
    }
    for path, body in stand_ins.items():
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(0o755)
    recipe = "recipes/router_r1_distill_qwen_1.5b.yaml"
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "slurm" / "train.slurm"), recipe, "3", "--learning_rate", "2e-6"],
        capture_output=True, text=True, timeout=60,
        env={**env, "VENV": str(tmp_path / "venv"), "SLURM_SUBMIT_DIR": str(REPO_ROOT), "SLURM_NNODES": "2",
             "SLURM_JOB_NODELIST": "node-[a-b]"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    runs = [run.splitlines() for run in launched.read_text().strip().split("\n\n")]
    assert len(runs) == 2
    for rank, argv in enumerate(runs):
        options = dict(zip(argv, argv[1:]))
        assert options["--num_machines"] == "2" and options["--num_processes"] == "8"
        assert options["--machine_rank"] == str(rank) and options["--main_process_ip"] == "node-a"
        assert options["--config_file"] == "accelerate_configs/zero2.yaml"
        entry = argv[argv.index("routing_grpo.train") + 1 :]
        assert entry[:4] == ["--config", recipe, "--seed", "3"] and entry[-2:] == ["--learning_rate", "2e-6"]
        monkeypatch.chdir(REPO_ROOT)
        on_cpu = ["--bf16", "false", "--use_cpu", "true"]  # the GPU recipe parsed on this machine
        _, training_args, _ = train.parse_args(entry + on_cpu)
        assert training_args.seed == 3 and training_args.learning_rate == 2e-6
        assert "SIGUSR1" in training_args.preemption_signals


def readme_own_data_commands() -> list[str]:
    """README's own-data CPU commands, as written (continuation lines joined, comments dropped)."""
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## Train on your own data on CPU")[1].split("\n## ")[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    lines = [line.split(" #")[0].strip() for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_readmes_own_data_cpu_path_is_the_cpu_recipe_on_math_train(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    commands = readme_own_data_commands()
    assert commands[0] == "make demo-deps"
    (training,) = [c for c in commands if "routing_grpo.train" in c]
    words = shlex.split(training)
    assert words[:3] == ["python", "-m", "routing_grpo.train"]
    options = dict(zip(words, words[1:]))
    assert options["--config"] == "recipes/demo_smollm2_cpu.yaml" and options["--task"] == "math_train"
    _, training_args, _ = train.parse_args(words[3:])
    assert training_args.use_cpu and not training_args.bf16


@pytest.mark.slow
def test_readmes_own_data_cpu_command_trains_on_a_small_file(tmp_path):
    """README's own-data command, run as README writes it, in a folder holding the recipes and a small JSONL
    file at the path it names."""
    pytest.importorskip("gguf")
    import importlib.metadata

    from routing_grpo.mini.offline import SMOLLM2_PACKAGE

    try:
        importlib.metadata.files(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"SmolLM2 is not installed (make demo-deps): no {SMOLLM2_PACKAGE}")
    (training,) = [c for c in readme_own_data_commands() if "routing_grpo.train" in c]
    words = shlex.split(training)
    options = dict(zip(words, words[1:]))
    data = tmp_path / options["--dataset_path"]
    data.parent.mkdir(parents=True)
    rows = [(f"What is {a} + {b}?", a + b) for a in range(3, 7) for b in range(2, 5)]
    data.write_text("".join(f'{{"problem": "{q}", "answer": "{s}"}}\n' for q, s in rows))
    (tmp_path / "recipes").symlink_to(REPO_ROOT / "recipes")
    done = subprocess.run(
        [sys.executable, *words[1:]], cwd=tmp_path, env=offline_env(), capture_output=True, text=True,
        timeout=3600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / options["--output_dir"]
    assert (run / "routing_config.json").is_file() and (run / "model.safetensors").is_file()
