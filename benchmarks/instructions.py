"""The recording's work in instructions (Valgrind's callgrind): a count, not a clock.

    .venv/bin/python -m benchmarks.instructions "hopper_matmul 256" [REPS]

Wall-clock ratios on this VM move by several percent from run to run (`benchmarks.pinned`);
an instruction count moves by about 0.1 %. Five processes run the kernel under callgrind
at once, each counting only around REPS runs (after two warm ones; `callgrind_control`
switches the counting on and off), in the modes of `benchmarks.ablation`:

- `untraced`: the kernel alone;
- `no_hooks`: inside `pv.trace()` with nothing installed and no build after the run: the
  block's own entering and leaving;
- `pass_through`: also every recording wrapper installed, each only calling the
  interpreter's method: the cost of having wrappers at all;
- `no_build`: the hooks as they are, without the after-the-run build (`trace._finish`:
  numbering the events, the table, the analyses): the recording during the run;
- `traced`: inside `pv.trace()`, as `benchmarks.run` times it.

It prints instructions per run and traced ÷ untraced, split into those parts (each mode
less the one before it). Instructions are not time: the hooks run between the
interpreter's own steps, out of the processor's caches, and cost more per instruction
than the build, which runs warm. XLA and OpenBLAS run one thread each and XLA compiles for
AVX2 (Valgrind 3.19 does not decode AVX-512). A run takes about 50 times its native time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

MODES = ("untraced", "no_hooks", "pass_through", "no_build", "traced")
# what each mode adds to the one before it
PARTS = {"no_hooks": "entering and leaving the block",
         "pass_through": "wrappers installed (each only calls the interpreter)",
         "no_build": "the hooks' work during the run",
         "traced": "the build after the run"}
ENV = {"OPENBLAS_NUM_THREADS": "1",
       "XLA_FLAGS": "--xla_cpu_max_isa=AVX2 --xla_cpu_multi_thread_eigen=false "
                    "intra_op_parallelism_threads=1"}


def _child(mode: str, name: str, reps: int) -> None:
    """Run in a callgrind process: warm up, then count `reps` runs of `mode`."""
    import pallas_viz as pv
    from benchmarks.ablation import _mode
    from benchmarks.kernels import interpret_context, kernel_named

    kernel = kernel_named(name)

    def run():
        if mode == "untraced":
            kernel()
            return None
        with _mode(mode), pv.trace() as tr:
            kernel()
        return tr

    with interpret_context(kernel):
        run()
        run()
        control = ["callgrind_control", "-i"]
        subprocess.run([*control, "on", str(os.getpid())], check=True,
                       stdout=subprocess.DEVNULL)
        for _ in range(reps):
            tr = run()
        subprocess.run([*control, "off", str(os.getpid())], check=True,
                       stdout=subprocess.DEVNULL)
    out = {"mode": mode, "kernel": kernel.name}
    if mode == "traced":
        out["events"] = len(tr.events)
        out["barrier_ops"] = len(tr.meta.get("barrier_ops") or [])
    print(json.dumps(out))


def _total(path: str) -> int:
    with open(path) as f:
        for line in f:
            m = re.match(r"totals:\s+(\d+)", line)
            if m:
                return int(m.group(1))
    raise RuntimeError(f"no totals in {path}")


def measure(name: str, reps: int = 1) -> dict:
    """Instructions per run of each mode for the kernel named by `name`, and the ratios."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("benchmarks.instructions needs valgrind (callgrind)")
    tmp = tempfile.mkdtemp(prefix="pv-instructions-")
    procs = {}
    for mode in MODES:
        out = os.path.join(tmp, f"callgrind.{mode}")
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={out}", sys.executable, "-m", "benchmarks.instructions",
               "--child", mode, name, str(reps)]
        procs[mode] = (out, subprocess.Popen(cmd, env={**os.environ, **ENV},
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True))
    counts, info = {}, {}
    for mode, (out, p) in procs.items():
        stdout, stderr = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"{mode} failed ({p.returncode}):\n{stderr[-2000:]}")
        info.update(json.loads(stdout.strip().splitlines()[-1]))
        counts[mode] = _total(out) / reps
    shutil.rmtree(tmp, ignore_errors=True)
    u = counts["untraced"]
    shares = {m: (counts[m] - counts[prev]) / u for prev, m in zip(MODES, MODES[1:])}
    return {"kernel": info["kernel"], "reps": reps, "instructions": counts,
            "ratio": counts["traced"] / u, "shares": shares,
            "events": info.get("events"), "barrier_ops": info.get("barrier_ops")}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        _child(argv[1], argv[2], int(argv[3]))
        return 0
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    from benchmarks.kernels import kernel_named

    if kernel_named(argv[0]) is None:
        return 2
    r = measure(argv[0], int(argv[1]) if len(argv) > 1 else 1)
    c = r["instructions"]
    n = (r["events"] or 0) + (r["barrier_ops"] or 0)
    print(f"{r['kernel']}: instructions per run (callgrind, {r['reps']} counted run(s) each)")
    for mode in MODES:
        print(f"  {mode:13s} {c[mode] / 1e6:10.1f} M")
    print(f"  traced / untraced {r['ratio']:.4f}, of which:")
    for mode, what in PARTS.items():
        per = f", {r['shares'][mode] * c['untraced'] / n:,.0f} per event" if n else ""
        print(f"    {r['shares'][mode] * 100:+6.2f} %  {what}{per}")
    if n:
        print(f"  ({r['events']} allocation events + {r['barrier_ops']} barrier operations a "
              "run; two counts of one mode differ by about 0.1 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
