"""The wheels a bare GPU image lacks for ``benchmarks/gpu_check.py``, fetched into one folder (64 MiB at most).

    python -m benchmarks.gpu_bundle [--dest .gpu_bundle] [--python-version 3.12]

For a GPU machine that has CUDA PyTorch, transformers, accelerate and peft but no package index: run this on a
machine that has one, bring the folder along, and on the GPU machine run the line it prints (also in
docs/benchmarks.md, "GPU check"). Fetched with ``--no-deps`` for the GPU machine's Python, pure-Python
wheels all: TRL at the version ``constraints-gpu.txt`` pins, the rest at the versions the CPU tests run with
(``BUNDLE``), and this project's own wheel (its offline models and entry points with it). Nothing is
installed here.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DEST = REPO_ROOT / ".gpu_bundle"
LIMIT_BYTES = 64 * 2**20
# What the GPU image lacks (TRL, datasets and its two helpers, the math grader and its parser). A version
# here is used unless constraints-gpu.txt pins the package.
BUNDLE = {
    "trl": "1.16.0",
    "datasets": "5.2.0",
    "dill": "0.4.1",
    "multiprocess": "0.70.19",
    "math-verify": "0.9.0",
    "latex2sympy2_extended": "1.11.0",
    "antlr4-python3-runtime": "4.13.2",
}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
INSTALL_AND_RUN = (
    "python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site {dest}/*.whl && "
    "PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site python3 -m benchmarks.gpu_check --output gpu_check"
)


def pinned_versions(constraints: Path) -> dict[str, str]:
    """``name==version`` lines of a constraints file, names normalised (lower case, ``_`` as ``-``)."""
    pins: dict[str, str] = {}
    for line in constraints.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = (part.strip() for part in line.split("==", 1))
            pins[normalise(name)] = version
    return pins


def normalise(name: str) -> str:
    return name.lower().replace("_", "-")


def requirements(constraints: Path) -> list[str]:
    """``name==version`` for every bundled package: constraints-gpu.txt's pin where it has one."""
    pins = pinned_versions(constraints) if constraints.is_file() else {}
    return [f"{name}=={pins.get(normalise(name), version)}" for name, version in BUNDLE.items()]


def download_command(reqs: list[str], dest: Path, python_version: str) -> list[str]:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", python_version, "--implementation", "cp", "--dest", str(dest)]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    return cmd + reqs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dest", type=Path, default=DEFAULT_DEST, help="folder for the wheels (default .gpu_bundle)"
    )
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    parser.add_argument("--constraints", type=Path, default=REPO_ROOT / "constraints-gpu.txt")
    args = parser.parse_args(argv)
    args.dest.mkdir(parents=True, exist_ok=True)
    for old in args.dest.glob("*.whl"):  # one version of each: two would stop the install there
        old.unlink()
    reqs = requirements(args.constraints)
    subprocess.run(download_command(reqs, args.dest, args.python_version), check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(args.dest), str(REPO_ROOT)],
        check=True,
    )  # fmt: skip
    wheels = sorted(args.dest.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels)
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    print(f"{total / 2**20:7.2f} MiB in {len(wheels)} wheels ({', '.join(reqs)} and routing-grpo)")
    if total > LIMIT_BYTES:
        print(f"over the {LIMIT_BYTES // 2**20} MiB a GPU machine takes along", file=sys.stderr)
        return 1
    try:
        dest = args.dest.resolve().relative_to(REPO_ROOT)
    except ValueError:
        dest = args.dest
    print("On the GPU machine, in the repository's root:")
    print("  " + INSTALL_AND_RUN.format(dest=dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
