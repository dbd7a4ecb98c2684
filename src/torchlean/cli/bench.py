"""``torchlean bench``: time W1-W5 in every installed framework, side by side in one process.

The workloads (``torchlean.bench.harness``): W1 a 500-op elementwise chain forward+backward, W2 an
MLP training step, W3 a CNN training step, W4 a Hessian-vector product, W5 a transformer-block
training step. Peers: PyTorch eager, JAX jit, HIPS autograd and a hand-written NumPy floor, each
checked to agree before anything is timed. Every run is repeated per thread count (``--threads
1,2`` by default), and the main job is timed side by side: ``torchlean train`` on digits (MLP and
CNN, eager and compiled) against the same training in PyTorch, each in a fresh one-thread process.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

from ..bench import harness as H
from ..core.backend import namespace_for
from . import common


def add_parser(sub: Any) -> None:
    workloads = "; ".join(f"{w}: {t}" for w, t in H.TITLES.items())
    p = sub.add_parser(
        "bench", help="time workloads W1-W5 side by side with PyTorch, JAX, autograd, NumPy",
        description=f"Time the workloads in every installed framework (agreement checked "
                    f"first). {workloads}.")
    p.add_argument("--workloads", default=None,
                   help=f"comma-separated subset of {','.join(H.WORKLOADS)} (default all; "
                        f"with --device cuda a subset of {','.join(H.GPU_WORKLOADS)})")
    p.add_argument("--frameworks", default=None,
                   help=f"comma-separated subset of {','.join(H.FRAMEWORKS)} (default all "
                        f"installed; with --device cuda of {','.join(H.GPU_FRAMEWORKS)}); "
                        "also torchlean-interpreted: the compiled graph with its plan "
                        "interpreted instead of generated code (the before of engine/codegen)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: time W2, W3 and W5 on the GPU (torchlean eager, compiled, "
                        "compiled + CUDA graph, PyTorch CUDA eager); needs CuPy and a GPU")
    p.add_argument("--rounds", type=common.int_in(1, 10_000, "a round count"), default=7,
                   help="timed rounds (default 7)")
    p.add_argument("--threads", type=_thread_counts, default=None, dest="thread_counts",
                   help="BLAS / PyTorch threads for every framework: one count or several, "
                        "comma-separated, each a full run (default 1,2; 1 on one core)")
    p.add_argument("--main-jobs", default=None, metavar="LIST",
                   help=f"the main job side by side: comma-separated subset of "
                        f"{','.join(H.MAIN_JOBS)} (torchlean train digits MLP / CNN, eager and "
                        "compiled, against the same training in PyTorch, one thread, fresh "
                        "processes), or 'none' (default: both)")
    p.add_argument("--main-rounds", type=common.int_in(1, 100, "a round count"), default=3,
                   help="interleaved rounds of each main job per side (default 3)")
    p.add_argument("--main-epochs", type=common.int_in(0, 100_000, "an epoch count"),
                   default=0, help="epochs of each main job (default 0: the recipe's)")
    p.add_argument("--json", default=None, metavar="PATH", type=common.output_path,
                   help="also write JSON here")
    p.add_argument("--clock", choices=tuple(H.CLOCKS), default="wall",
                   help="what a step's time is read from: wall (default) or cpu (this "
                        "process's CPU time: on a shared machine at --threads 1, the step's "
                        "own work; above 1 thread the threads' sum, not the wait)")
    p.add_argument("--isolated", action="store_true",
                   help="also time torchlean alone in fresh processes and measure peak "
                        "memory of 200 W2 steps per framework")
    # A fresh process of --isolated runs this command with --child (not for users).
    p.add_argument("--child", choices=("time", "memory", "main"), help=argparse.SUPPRESS)


def _thread_counts(text: str) -> list[int]:
    counts = [common.threads_int(t.strip()) for t in text.split(",") if t.strip()]
    if not counts:
        raise argparse.ArgumentTypeError(f"expected thread counts such as 1,2, found {text!r}")
    return list(dict.fromkeys(counts))


def _names(text: str, allowed: Sequence[str], what: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise H.BenchError(f"bench: unknown {what} {bad or text!r}; expected a comma-separated "
                           f"subset of {','.join(allowed)}")
    return names


def run(args: argparse.Namespace) -> int:
    """Validate the arguments, run, print the table (and write JSON)."""
    gpu = getattr(args, "device", "cpu") == "cuda"
    args.clock = getattr(args, "clock", "wall")
    all_workloads, all_frameworks = ((H.GPU_WORKLOADS, H.GPU_FRAMEWORKS) if gpu
                                     else (H.WORKLOADS, H.FRAMEWORKS))
    where = " on --device cuda" if gpu else ""
    workloads = _names(args.workloads or ",".join(all_workloads), all_workloads,
                       "workloads" + where)
    frameworks = _names(args.frameworks or ",".join(all_frameworks),
                        tuple(all_frameworks) + (() if gpu else H.EXTRA_FRAMEWORKS),
                        "frameworks" + where)
    common.check_outputs([(args.json, "--json")])
    jobs = ([] if args.main_jobs == "none" else
            _names(args.main_jobs or ",".join(H.MAIN_JOBS), H.MAIN_JOBS, "main jobs"))
    threads = args.thread_counts or [1, 2][: max(1, min(2, os.cpu_count() or 1))]
    if gpu:
        args.threads = threads[0]
        if args.isolated:
            raise H.BenchError("bench: --isolated times CPU processes; it does not apply to "
                               "--device cuda")
        if args.clock != "wall":
            raise H.BenchError("bench: --clock cpu does not apply to --device cuda (the "
                               "device's work is not this process's CPU time); use --clock "
                               "wall")
        return _run_gpu(args, workloads, frameworks)
    if getattr(args, "child", None):
        args.threads = threads[0]
        return _child(args, workloads, frameworks)
    command = (f"torchlean bench --workloads {','.join(workloads)} --frameworks "
               f"{','.join(frameworks)} --rounds {args.rounds} --threads "
               f"{','.join(map(str, threads))} --main-jobs {','.join(jobs) or 'none'}"
               + (" --isolated" if args.isolated else "")
               + (f" --clock {args.clock}" if args.clock != "wall" else ""))
    runs = []
    for count in threads:
        limiter = H.pin_threads(count)
        result: dict[str, Any] = {"machine": H.machine_info(), "threads": count,
                                  "rounds": args.rounds, "command": command,
                                  "clock": args.clock}
        result["workloads"] = {w: H.bench_workload(w, frameworks, args.rounds,
                                                   clock=args.clock, threads=count)
                               for w in workloads}
        if args.isolated:
            result["isolated"] = H.run_isolated(workloads, frameworks, args.rounds, count,
                                                args.clock)
        del limiter
        result["load_average_end"] = list(os.getloadavg())
        print(H.format_report(result), flush=True)
        print(flush=True)
        runs.append(result)
    main = None
    if jobs:
        main = H.main_jobs(jobs, args.main_rounds, args.main_epochs or None,
                           torch_available="torch" in frameworks and H.has_torch())
        print(H.format_main_jobs(main), flush=True)
    if args.json:
        common.write_text(args.json, json.dumps({"command": command, "runs": runs,
                                                 "main_jobs": main}, indent=1))
    return 0


def _child(args: argparse.Namespace, workloads: list[str], frameworks: list[str]) -> int:
    """Entry of a fresh process: time (or run 200 steps of) one framework, print JSON."""
    limiter = H.pin_threads(args.threads)
    if args.child == "main":
        print(json.dumps(H.torch_main_job(_names(args.main_jobs, H.MAIN_JOBS, "main jobs")[0],
                                          args.main_epochs or None)))
        return 0
    if args.child == "memory":
        impl = H.build("W2", frameworks[0], H.make_data("W2"))
        if isinstance(impl, str):
            print(json.dumps({"note": impl}))
            return 0
        for _ in range(200):
            impl.step()
        print(json.dumps({"peak_mib": H.peak_rss_mib()}))
        return 0
    out = {w: H.bench_workload(w, frameworks, args.rounds, check=False,
                               clock=args.clock, threads=args.threads)["times"]
           for w in workloads}
    print(json.dumps(out))
    del limiter
    return 0


def _report(result: dict[str, Any], args: argparse.Namespace) -> int:
    """Print the report of a finished run (and write it to ``--json``)."""
    result["load_average_end"] = list(os.getloadavg())
    print(H.format_report(result))
    if args.json:
        common.write_text(args.json, json.dumps(result, indent=1))
    return 0


def _run_gpu(args: argparse.Namespace, workloads: Sequence[str], frameworks: Sequence[str]
             ) -> int:
    """``--device cuda``: a ``DeviceError`` (no CuPy, no GPU) before anything is built;
    otherwise the table, with synchronised timing and ratios to PyTorch CUDA eager."""
    xp = namespace_for("cuda")
    limiter = H.pin_threads(args.threads)
    result: dict[str, Any] = {"machine": H.machine_info(), "threads": args.threads,
                              "rounds": args.rounds, "device": "cuda", "gpu": H.gpu_info(xp),
                              "command": (f"torchlean bench --device cuda --workloads "
                                          f"{','.join(workloads)} --frameworks "
                                          f"{','.join(frameworks)} --rounds {args.rounds}")}
    result["workloads"] = {w: H.bench_workload_gpu(w, frameworks, args.rounds, xp)
                           for w in workloads}
    del limiter
    return _report(result, args)
