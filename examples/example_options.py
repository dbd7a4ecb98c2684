"""The command line the example scripts share: ``--epochs`` and ``--threads``.

``--epochs`` sets a run's length (each script's learning-rate schedule spans it, so a short run
is a complete, smaller run); ``--threads`` pins BLAS threads, as ``torchlean train`` does, so a
busy machine slows a run down instead of making its threads spin against other processes.
"""

from __future__ import annotations

import argparse


def parse(description: str, epochs: int) -> argparse.Namespace:
    """The parsed options, with BLAS pinned to ``--threads`` (threadpoolctl, which comes with
    scikit-learn; without it the setting is left as it is)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--epochs", type=int, default=epochs,
                        help=f"training epochs (default {epochs})")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    args = parser.parse_args()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return args
    threadpool_limits(limits=args.threads, user_api="blas")
    return args
