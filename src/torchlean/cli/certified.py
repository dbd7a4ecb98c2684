"""``torchlean train --certified ibp|crown-ibp``: the options and settings of certified training.

``train`` asks this module for its options (``add_options``), the certified-training config
(``config_from``: ``None`` without ``--certified``), the recipe's defaults (60 epochs, batch 64,
Adam 1e-3, as auto_LiRPA's), the learning rate after each epoch (halved every 10 epochs once the
target eps is reached) and the epoch line's extra fields. The work is
``torchlean.bounds.certified_training``.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..bounds.certified_training import INITS, METHODS, CertifiedConfig, CertifiedTrainingError

RECIPE = {"epochs": 60, "batch_size": 64, "lr": 1e-3, "optimizer": "adam"}
LR_HALVING_EPOCHS = 10
# The recipe's regularising settings per model and method (``--certified-reg``,
# ``--label-smoothing``), chosen on a validation split held out of the training set (20%, seeds
# 0-4; README, "Certified training"). MLP: Shi et al. 2021's warm-up regularisers at 2 (against
# their 0.5: 0.5 -> 2 raised the IBP column most, 4 and 8 lost CROWN and alpha-CROWN) with the
# robust loss's labels smoothed by 0.1 (0.05-0.2 tried): for both methods, at eps 0.05 and 0.1
# every verified column rose. CNN, CROWN-IBP (eps 0.05, validation 20%, seeds 0-2, mean IBP /
# CROWN / alpha-CROWN): the regularisers at 0.5 with labels smoothed by 0.1, 0.652 / 0.777 /
# 0.778, against 0.635 / 0.769 / 0.772 with neither, 0.654 / 0.771 / 0.772 smoothing alone,
# 0.648 / 0.770 / 0.772 regularisers at 2 and smoothing; the max-pool chord (``pool_chord``, the
# certifier's relaxation) lost, 0.623 / 0.762 / 0.764, so it stays off. CNN, IBP: both off (not
# measured there). ``pool_chord`` only exists for CROWN-IBP.
DEFAULTS: dict[tuple[str, str], dict[str, float | bool]] = {
    ("mlp", "ibp"): {"reg": 2.0, "smoothing": 0.1, "pool_chord": False},
    ("mlp", "crown-ibp"): {"reg": 2.0, "smoothing": 0.1, "pool_chord": False},
    ("cnn", "ibp"): {"reg": 0.0, "smoothing": 0.0, "pool_chord": False},
    ("cnn", "crown-ibp"): {"reg": 0.5, "smoothing": 0.1, "pool_chord": False},
}


def defaults(model: str, method: str) -> dict[str, float | bool]:
    """The default ``CertifiedConfig`` settings (``reg``, ``smoothing``, ``pool_chord``) of
    ``model`` trained by ``method``."""
    if (model, method) not in DEFAULTS:
        raise CertifiedTrainingError(f"--certified: no defaults for model {model!r} and method "
                                     f"{method!r}")
    return dict(DEFAULTS[model, method])


def add_options(p: argparse.ArgumentParser) -> None:
    """Register ``--certified``, ``--eps``, ``--eps-schedule``, ``--kappa``, ``--beta``,
    ``--grad-clip``, ``--batch-norm``, ``--certified-reg``, ``--label-smoothing``,
    ``--pool-chord``, ``--certified-l1``, ``--certified-init``."""
    g = p.add_argument_group(
        "certified training",
        "train for certified robustness on L-infinity balls clipped to [0, 1] (auto_LiRPA's "
        "recipe; the defaults become 60 epochs, batch 64, adam lr 1e-3 halved every 10 epochs "
        "once the target eps is reached); certify the result with 'torchlean certify'")
    g.add_argument("--certified", choices=METHODS, default=None,
                   help="the bounds the robust loss is computed on: ibp or crown-ibp")
    g.add_argument("--eps", type=_positive, default=None,
                   help="target L-infinity radius (required with --certified), e.g. 0.1")
    g.add_argument("--eps-schedule", default="10,30", metavar="WARMUP,RAMP",
                   help="epochs at eps 0, then epochs of the smooth ramp to --eps, stepped "
                        "per batch (default 10,30)")
    g.add_argument("--kappa", default="0", metavar="START[,END]",
                   help="weight of the natural loss against the robust one, linear from START "
                        "to END over the ramp (default 0: the robust loss alone)")
    g.add_argument("--beta", default="1,0", metavar="START,END",
                   help="crown-ibp: weight of the CROWN bound against the IBP one, linear in "
                        "eps_t / eps from START at the start of the ramp to END at the target "
                        "(default 1,0 as the reference; 1,1 keeps CROWN-IBP throughout)")
    g.add_argument("--grad-clip", type=_positive, default=10.0,
                   help="clip the gradients' global norm (default 10)")
    g.add_argument("--batch-norm", action="store_true",
                   help="the mlp or cnn with batch normalisation before each hidden relu (as "
                        "the reference's cnn_7layer); bounded with the clean batch's statistics "
                        "in training, certified in eval mode with the running statistics")
    g.add_argument("--certified-reg", type=_non_negative, default=None, metavar="LAMBDA",
                   help="weight of Shi et al. 2021's warm-up regularisers (interval tightness and "
                        "relu balance of the IBP pre-activation bounds), decaying with the ramp "
                        "as LAMBDA * (1 - eps_t / eps) (default: per model and method, "
                        f"{_listed('reg')})")
    g.add_argument("--label-smoothing", type=_fraction, default=None, metavar="S",
                   help="smooth the robust loss's labels to (1 - S) one-hot + S / classes "
                        f"(default: per model and method, {_listed('smoothing')})")
    g.add_argument("--pool-chord", choices=("on", "off"), default=None,
                   help="crown-ibp: bound max pooling's upper side in the CROWN pass by the "
                        "certifier's chord (on) or the window's greatest upper bound (off, "
                        "auto_LiRPA's) (default: per model and method, "
                        f"{_listed('pool_chord')})")
    g.add_argument("--certified-l1", type=_non_negative, default=0.0, metavar="W",
                   help="add W * sum |weights| (matrices and kernels) to the loss (default 0)")
    g.add_argument("--certified-init", choices=INITS, default="default",
                   help="initial weights: the model's default, or ibp (Shi et al. 2021: "
                        "N(0, 2 pi / fan_in^2) for every layer but the last)")


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, found {text!r}") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, found {text!r}")
    return v


def _listed(key: str) -> str:
    def shown(v: float | bool) -> str:
        return ("on" if v else "off") if isinstance(v, bool) else f"{v:g}"
    return ", ".join(f"{m} {meth} {shown(v[key])}" for (m, meth), v in DEFAULTS.items())


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, found {text!r}") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), found {text!r}")
    return v


def _non_negative(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, found {text!r}") from None
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, found {text!r}")
    return v


def _numbers(option: str, text: str, count: tuple[int, ...], kind: type) -> list[Any]:
    parts = [t.strip() for t in str(text).split(",")]
    try:
        values = [kind(t) for t in parts]
    except ValueError:
        raise CertifiedTrainingError(f"{option}: expected {' or '.join(map(str, count))} "
                                     f"comma-separated {kind.__name__}s, found {text!r}") from None
    if len(values) not in count:
        raise CertifiedTrainingError(f"{option}: expected {' or '.join(map(str, count))} "
                                     f"values, found {len(values)} in {text!r}")
    return values


def config_from(args: argparse.Namespace, epochs: int) -> CertifiedConfig | None:
    """The certified-training config the options ask for (``None`` without ``--certified``);
    errors name the option."""
    if args.certified is None:
        if args.eps is not None:
            raise CertifiedTrainingError("--eps is the target radius of certified training: "
                                         "give --certified ibp|crown-ibp with it")
        if getattr(args, "batch_norm", False):
            raise CertifiedTrainingError("--batch-norm is a model of certified training: give "
                                         "--certified ibp|crown-ibp with it")
        return None
    if args.model not in ("mlp", "cnn"):
        raise CertifiedTrainingError(f"--certified: certified training takes the mlp or cnn "
                                     f"models (classifiers of images in [0, 1]), found "
                                     f"{args.model!r}")
    if (args.dataset or "digits") != "digits":
        raise CertifiedTrainingError("--certified: certified training needs inputs in [0, 1] "
                                     f"(the digits dataset), found {args.dataset!r}")
    if args.eps is None:
        raise CertifiedTrainingError("--certified: give the target radius with --eps, e.g. "
                                     "--eps 0.1")
    warmup, ramp = _numbers("--eps-schedule", args.eps_schedule, (2,), int)
    if warmup < 0 or ramp < 0:
        raise CertifiedTrainingError(f"--eps-schedule: epoch counts must be >= 0, found "
                                     f"{args.eps_schedule!r}")
    if warmup + ramp > epochs:
        raise CertifiedTrainingError(f"--eps-schedule: {warmup} warm-up + {ramp} ramp epochs "
                                     f"exceed the {epochs} epochs of training")
    kappa = _numbers("--kappa", args.kappa, (1, 2), float)
    if not all(0 <= k <= 1 for k in kappa):
        raise CertifiedTrainingError(f"--kappa: weights must lie in [0, 1], found {args.kappa!r}")
    beta = _numbers("--beta", args.beta, (2,), float)
    if not all(0 <= b <= 1 for b in beta):
        raise CertifiedTrainingError(f"--beta: weights must lie in [0, 1], found {args.beta!r}")
    if args.certified != "crown-ibp" and args.beta != "1,0":
        raise CertifiedTrainingError("--beta weighs CROWN-IBP's CROWN bound: give it with "
                                     "--certified crown-ibp")
    pool_chord = getattr(args, "pool_chord", None)
    if pool_chord == "on" and args.certified != "crown-ibp":
        raise CertifiedTrainingError("--pool-chord relaxes max pooling in CROWN-IBP's CROWN "
                                     "pass: give it with --certified crown-ibp")
    settings = defaults(args.model, args.certified)
    if pool_chord is not None:
        settings["pool_chord"] = pool_chord == "on"
    if args.certified_reg is not None:
        settings["reg"] = float(args.certified_reg)
    if getattr(args, "label_smoothing", None) is not None:
        settings["smoothing"] = float(args.label_smoothing)
    settings["l1"] = float(getattr(args, "certified_l1", 0.0))
    return CertifiedConfig(args.certified, float(args.eps), warmup_epochs=warmup,
                           ramp_epochs=ramp, kappa=(kappa[0], kappa[-1]),
                           beta=(beta[0], beta[1]),
                           grad_clip=float(args.grad_clip), init=args.certified_init,
                           seed=int(args.seed), reg=float(settings["reg"]),
                           smoothing=float(settings["smoothing"]), l1=float(settings["l1"]),
                           pool_chord=bool(settings["pool_chord"]))


def lr_after(config: CertifiedConfig, base_lr: float, epoch: int) -> float:
    """The learning rate for the epoch after ``epoch`` (epochs count from 1): ``base_lr``,
    halved every 10 epochs once the ramp has reached the target, as auto_LiRPA's recipe (its
    StepLR steps at the start of each epoch after the target is reached, so with the target
    reached in epoch ``T`` the rate halves for epochs ``T + 10``, ``T + 20``, ...)."""
    at_target = config.warmup_epochs + config.ramp_epochs
    return base_lr * 0.5 ** max(0, (epoch + 1 - at_target) // LR_HALVING_EPOCHS)


def epoch_fields(extra: dict[str, float]) -> str:
    """The epoch line's certified-training fields."""
    if "robust_loss" not in extra:
        return ""
    return (f"  eps {extra['eps']:.4f}  robust loss {extra['robust_loss']:.4f}  "
            f"verified err {extra['verified_error']:.3f}")
