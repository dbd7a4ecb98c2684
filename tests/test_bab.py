"""Branch and bound over input boxes (torchlean.bounds.bab): verdicts against the exact truth.

On small random ReLU nets (2-3 inputs) the truth is computed exactly: the least value of the
unsafe objective ``max_r (a_r . y - b_r)`` over the box, by a big-M MILP (scipy's HiGHS) in real
arithmetic; the thresholds are then shifted so the truth is clear by a margin (unsafe points
exist, or every output stays a margin away). ``search`` must answer ``unsat`` exactly when the
truth is safe and ``sat`` with a point the float32 network really maps into the unsafe set
otherwise; a planted wrong interval rule must make these checks fail. Budgets are counts
(domains, attack steps), never timings.
"""

from __future__ import annotations

import csv
import itertools
import os
import re
from pathlib import Path

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn, onnx
from torchlean.bounds import bab, compute_bounds, forward, ibp
from torchlean.bounds.ibp import Interval

MARGIN = 0.01  # fraction of the objective's range separating the truth from the threshold


def _mlp(sizes):
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


def _weights(model):
    return [(np.asarray(m.weight.data, np.float64), np.asarray(m.bias.data, np.float64))
            for m in model if isinstance(m, nn.Linear)]


def _models(model, n_in, max_batch=64, intermediate="crown"):
    return bab.Models(lambda b: tl.compile(lambda x: model(x), (b, n_in)), max_batch=max_batch,
                      intermediate=intermediate)


def _interval_layers(weights, lo, hi):
    """Pre-activation intervals of every layer, the output's last (plain float64 interval
    arithmetic, widened: only the big-M constants and variable ranges of the MILP come from
    them)."""
    boxes, l, u = [], lo, hi
    for w, b in weights:
        c, r = (l + u) / 2, (u - l) / 2
        zc, zr = w @ c + b, np.abs(w) @ r
        zl, zu = zc - zr - 1e-6, zc + zr + 1e-6
        boxes.append((zl, zu))
        l, u = np.maximum(zl, 0), np.maximum(zu, 0)
    return boxes


def _least_objective(weights, lo, hi, a, c):
    """Exact ``min_x max_r (a_r . N(x) - c_r)`` over the box for the real-valued ReLU net."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    n_in = lo.size
    hidden = [w.shape[0] for w, _ in weights[:-1]]
    n_out = weights[-1][0].shape[0]
    total = n_in + 3 * sum(hidden) + n_out + 1  # x, (z, a, d) per layer, y, t
    t_pos = total - 1
    var_lo, var_hi = np.full(total, -np.inf), np.full(total, np.inf)
    var_lo[:n_in], var_hi[:n_in] = lo, hi
    integrality = np.zeros(total)
    rows, lbs, ubs = [], [], []

    def add(coeffs, lb, ub):
        r = np.zeros(total)
        for k, v in coeffs:
            r[k] += v
        rows.append(r)
        lbs.append(lb)
        ubs.append(ub)

    boxes = _interval_layers(weights, lo, hi)
    prev, pos = list(range(n_in)), n_in
    for k, (w, b) in enumerate(weights):
        last = k == len(weights) - 1
        h = w.shape[0]
        z0 = pos
        for j in range(h):  # z_j = W_j . prev + b_j
            add([(z0 + j, 1.0)] + [(p, -w[j, q]) for q, p in enumerate(prev)], b[j], b[j])
        zl, zu = boxes[k]
        var_lo[z0:z0 + h], var_hi[z0:z0 + h] = zl, zu
        if last:
            y0 = z0
            break
        a0, d0 = pos + h, pos + 2 * h
        var_hi[a0:a0 + h] = np.maximum(zu, 0)
        integrality[d0:d0 + h] = 1
        var_lo[d0:d0 + h], var_hi[d0:d0 + h] = 0, 1
        var_lo[a0:a0 + h] = 0
        for j in range(h):
            add([(a0 + j, 1), (z0 + j, -1)], 0, np.inf)                          # a >= z
            add([(a0 + j, 1), (z0 + j, -1), (d0 + j, -zl[j])], -np.inf, -zl[j])  # a <= z-l(1-d)
            add([(a0 + j, 1), (d0 + j, -zu[j])], -np.inf, 0)                     # a <= u d
        prev, pos = list(range(a0, a0 + h)), pos + 3 * h
    for r in range(len(c)):  # a_r . y - c_r <= t
        add([(y0 + o, a[r, o]) for o in range(n_out)] + [(t_pos, -1.0)], -np.inf, c[r])
    y_lo, y_hi = boxes[-1]
    reach = np.abs(a) @ np.maximum(np.abs(y_lo), np.abs(y_hi)) + np.abs(c)
    var_lo[t_pos], var_hi[t_pos] = -reach.max() - 1, reach.max() + 1
    cost = np.zeros(total)
    cost[t_pos] = 1.0
    res = milp(cost, constraints=LinearConstraint(np.array(rows), lbs, ubs),
               integrality=integrality, bounds=Bounds(var_lo, var_hi),
               options={"mip_rel_gap": 1e-9})
    # HiGHS now and then stops with a "solve error" on these; the caller then draws another case
    return float(res.fun) if res.success else None


def _case(seed):
    """A random net, box and unsafe set (one or two conjunctions of one to three rows), with the
    thresholds placed a margin below or above the exact least objective: (model, spec, truth)."""
    rng = np.random.default_rng(seed)
    n_in = int(rng.integers(2, 4))
    depth = int(rng.integers(1, 3))
    n_out = 3
    tl.manual_seed(seed)
    model = _mlp((n_in, *[int(rng.integers(5, 9))] * depth, n_out))
    weights = _weights(model)
    centre = rng.uniform(-1, 1, n_in)
    lo = (centre - rng.uniform(0.2, 1.0, n_in)).astype(np.float32).astype(np.float64)
    hi = (centre + rng.uniform(0.2, 1.0, n_in)).astype(np.float32).astype(np.float64)
    n_conj = int(rng.integers(1, 3))
    a_parts, groups = [], []
    for j in range(n_conj):
        k = int(rng.integers(1, 4))
        a_parts.append(rng.normal(size=(k, n_out)))
        groups += [j] * k
    a = np.concatenate(a_parts)
    group = np.array(groups)
    c = rng.normal(size=len(group)) * 0.1
    leasts = [_least_objective(weights, lo, hi, a[group == j], c[group == j])
              for j in range(n_conj)]
    if any(v is None for v in leasts):
        return None
    least = min(leasts)
    x = rng.uniform(lo, hi, size=(4000, n_in))
    y = np.asarray(tl.compile(lambda v: model(v), (4000, n_in)).forward(x.astype(np.float32)),
                   np.float64)
    spread = float(np.ptp(y @ a.T)) + 1e-3
    safe = bool(rng.integers(0, 2))
    shift = least + (-MARGIN if safe else MARGIN) * spread  # the truth: least - shift = +/-
    b = c + shift
    spec = bab.Spec(lo, hi, lo.astype(np.float32), hi.astype(np.float32), a, b, group, n_conj)
    return model, spec, "unsat" if safe else "sat"


def _cases(count, start=0):
    """The first ``count`` cases from ``start`` on whose MILP solved (deterministic)."""
    found, seed = [], start
    while len(found) < count:
        case = _case(seed)
        if case is not None:
            found.append((seed, *case))
        seed += 1
        assert seed < start + 3 * count, "the MILP failed on too many cases"
    return found


def _confirm(model, spec):
    one = tl.compile(lambda v: model(v), (1, spec.lower.size))

    def confirm(x):
        y = np.asarray(one.forward(np.asarray(x, np.float32)[None]), np.float64)[0]
        gaps = y @ spec.a.T - spec.b
        met = any(np.all(gaps[spec.group == j] <= 0) for j in range(spec.n_conj))
        inside = np.all(x >= spec.inner_lower) and np.all(x <= spec.inner_upper)
        return (np.asarray(x, np.float64), y) if met and inside else None

    return confirm


DOMAIN_BUDGET = 100_000  # bound passes' boxes per case: a search past this makes no progress


def _no_runaway(counts):
    # the queue cap bounds the open domains, not the work: a split rule that never closes a
    # box (last session's look-ahead halved one input down to float spacing) must fail here,
    # not run for minutes
    assert counts["domains"] <= DOMAIN_BUDGET, f"no progress after {counts['domains']} domains"


def _verdicts(cases, intermediate="crown", **options):
    """``(seed, truth, answer)`` for every case where the answer is not the truth."""
    wrong = []
    for seed, model, spec, truth in cases:
        confirm = _confirm(model, spec)
        result = bab.search(_models(model, spec.lower.size, intermediate=intermediate), spec,
                            confirm, batch=32, max_domains=20_000, progress=_no_runaway,
                            **options)
        if result.status == "sat":
            x, y = result.counterexample
            assert confirm(x) is not None  # the reported point is a real counterexample
        if result.status != truth:
            wrong.append((seed, truth, result.status, result.reason))
    return wrong


CASES = _cases(16)


def test_verdicts_equal_the_exact_truth_on_small_relu_nets():
    assert _verdicts(CASES) == []


def test_verdicts_without_attacks_still_exact():
    # unsafe points must then be found by splitting (domain centres), not by the first attack
    assert _verdicts(CASES[:6], attack_steps=0) == []


def test_inherited_bounds_and_other_split_rules_keep_the_verdicts():
    # children reuse their parent's pre-activation bounds, refreshed by CROWN every third split
    assert _verdicts(CASES[6:], attack_steps=0, refresh_every=3) == []
    assert _verdicts(CASES[6:12], split="widest") == []
    assert _verdicts(CASES[:8], attack_steps=0, split="bound") == []


def test_look_ahead_keeps_the_verdicts():
    # every input tried, the split whose halves gain most kept ("off", the default, is above)
    assert _verdicts(CASES, attack_steps=0, lookahead="all") == []
    assert _verdicts(CASES[1::2], lookahead="all", split="widest") == []


def test_look_ahead_without_gain_keeps_the_heuristics_split():
    # case 10 (sat): the halves along inputs 1 and 2 hold the counterexample or come out looser
    # than their parent, those along input 0 gain ever less; ranking by raw worse halves
    # halved input 0 down to float spacing (past 20x this budget without an answer)
    (_, model, spec, truth), = [c for c in CASES if c[0] == 10]
    result = bab.search(_models(model, spec.lower.size), spec, _confirm(model, spec), batch=32,
                        max_domains=20_000, attack_steps=0, lookahead="all",
                        progress=_no_runaway)
    assert (truth, result.status) == ("sat", "sat")
    assert result.domains <= 20_000, result.domains


def test_best_split_ranks_by_the_gain_over_the_parent():
    cand_p = np.array([0, 0, 0, 1, 2, 2, 3, 3, 4, 4])
    parent = np.array([-4.0, -10.0, -5.0, -1.0, -1.0])
    first = np.array([-3.0, -1.0, np.inf, -2.0, -5.0, -6.0, -1.0 + 1e-6, -1.0, -1.0, -1.0])
    second = np.array([-1.0, -2.0, -4.0, -9.0, -5.0, np.inf, -0.5, np.inf, -2.0, -1.5])
    pick = bab._best_split(cand_p, np.concatenate([first, second]), parent)
    # domain 0: worse halves gain 1, 2, 0 -> candidate 1; domain 1: its only one; domain 2:
    # both worse halves no better than the parent (-6 is looser: no gain), the proved half
    # decides; domain 3: a worse-half gain under LOOKAHEAD_GAIN of the gap is none, so the
    # proved half wins; domain 4: no gain in either half of either -> the heuristic's first
    assert pick.tolist() == [1, 3, 5, 7, 8, 11, 13, 15, 17, 18]


def test_forward_intermediate_bounds_keep_the_verdicts():
    # forward-mode pre-activation bounds, then CROWN per (box, unstable neuron) where open
    assert _verdicts(CASES, intermediate="forward", attack_steps=0) == []


def test_a_planted_wrong_forward_relaxation_is_caught(monkeypatch):
    real = forward._relu

    def too_tight(f, lo, hi, vmag, lower_slope):
        out = real(f, lo, hi, vmag, lower_slope)
        out.cu = out.cu - 0.5 * (hi - lo)  # the relu's upper line moved below relu
        return out

    monkeypatch.setattr(forward, "_relu", too_tight)
    wrong = _verdicts(CASES, intermediate="forward", attack_steps=0)
    assert any(truth == "sat" and answer == "unsat" for _, truth, answer, _ in wrong)


def test_a_planted_wrong_interval_rule_is_caught(monkeypatch):
    rule = ibp.RULES["relu"]

    def too_tight(ins, attrs, ctx):
        out = rule(ins, attrs, ctx)
        return Interval(out.lo, out.lo + 0.5 * (out.hi - out.lo), out.eps)

    monkeypatch.setitem(ibp.RULES, "relu", too_tight)
    wrong = _verdicts(CASES, attack_steps=0)
    assert any(truth == "sat" and answer == "unsat" for _, truth, answer, _ in wrong)


def test_domain_cap_and_timeout_give_their_answers_and_search_reports_its_work():
    split = []
    for _, model, spec, truth in CASES:
        if truth == "unsat":
            confirm = _confirm(model, spec)
            full = bab.search(_models(model, spec.lower.size), spec, confirm, batch=4)
            assert full.status == "unsat" and full.domains >= 1 and full.passes >= 1
            assert set(full.as_dict()) >= {"status", "domains", "seconds", "reason"}
            if full.max_queue > 1:
                split.append((model, spec, confirm))
    assert split  # some unsat case needed splitting
    model, spec, confirm = split[0]
    capped = bab.search(_models(model, spec.lower.size), spec, confirm, batch=4, max_domains=1)
    assert capped.status == "unknown" and "cap" in capped.reason
    ticks = itertools.count()  # a clock one second further on at every reading
    late = bab.search(_models(model, spec.lower.size), spec, confirm, batch=4, timeout=2.0,
                      clock=lambda: float(next(ticks)), attack_steps=0)
    assert late.status == "timeout"


def test_bad_problems_raise_named_errors():
    _, model, spec, _ = CASES[0]
    models = _models(model, spec.lower.size)
    confirm = _confirm(model, spec)
    with pytest.raises(bab.BabError, match="timeout"):
        bab.search(models, spec, confirm, timeout=-1)
    with pytest.raises(bab.BabError, match="batch"):
        bab.search(models, spec, confirm, batch=0)
    with pytest.raises(bab.BabError, match="method"):
        bab.search(models, spec, confirm, method="beta-crown")
    with pytest.raises(bab.BabError, match="split"):
        bab.search(models, spec, confirm, split="sideways")
    with pytest.raises(bab.BabError, match="lookahead"):
        bab.search(models, spec, confirm, lookahead="sometimes")
    with pytest.raises(bab.BabError, match="lower > upper"):
        bab.Spec(spec.upper + 1, spec.upper, spec.inner_lower, spec.inner_upper, spec.a,
                 spec.b, spec.group, spec.n_conj)
    with pytest.raises(bab.BabError, match="inputs"):
        bab.search(models, bab.Spec(np.zeros(9), np.ones(9), np.zeros(9, np.float32),
                                    np.ones(9, np.float32), spec.a, spec.b, spec.group,
                                    spec.n_conj), confirm)
    with pytest.raises(bab.BabError, match="conjunction"):
        bab.Spec(spec.lower, spec.upper, spec.inner_lower, spec.inner_upper, spec.a, spec.b,
                 np.zeros(len(spec.b), np.int64), spec.n_conj + 1)


# --- ACAS Xu instances of the 2021 competition (../shared/vnncomp2021): never contradicted ---

ACAS = Path(__file__).resolve().parents[1] / ".." / "shared" / "vnncomp2021"
ACAS = Path(os.environ.get("TORCHLEAN_VNNCOMP", ACAS))
ACAS_CASES = [("ACASXU_run2a_1_1_batch_2000.onnx", "prop_1.vnnlib"),
              ("ACASXU_run2a_1_2_batch_2000.onnx", "prop_2.vnnlib"),
              ("ACASXU_run2a_2_1_batch_2000.onnx", "prop_3.vnnlib")]


def _acas_spec(path):
    """The input box and output rows of ACAS Xu properties 1-4 (``(assert (<= X_i v))`` box
    lines; output rows ``Y_i <= Y_j`` or ``Y_0 >= v``), read by a regular expression."""
    text = path.read_text()
    lo, hi = np.full(5, -np.inf), np.full(5, np.inf)
    for op, i, v in re.findall(r"\(assert \((<=|>=) X_(\d) ([-0-9.e]+)\)\)", text):
        (hi if op == "<=" else lo)[int(i)] = float(v)
    rows, b = [], []
    for i, j in re.findall(r"\(assert \(<= Y_(\d) Y_(\d)\)\)", text):
        r = np.zeros(5)
        r[int(i)], r[int(j)] = 1.0, -1.0
        rows.append(r)
        b.append(0.0)
    for v in re.findall(r"\(assert \(>= Y_0 ([-0-9.e]+)\)\)", text):
        rows.append(-np.eye(5)[0])
        b.append(float(np.nextafter(-float(v), np.inf)))  # rounded up: the unsafe set grows
    assert np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and rows
    inner_lo = lo.astype(np.float32)
    inner_lo = np.where(inner_lo < lo, np.nextafter(inner_lo, np.float32(np.inf)), inner_lo)
    inner_hi = hi.astype(np.float32)
    inner_hi = np.where(inner_hi > hi, np.nextafter(inner_hi, np.float32(-np.inf)), inner_hi)
    return bab.Spec(lo, hi, inner_lo, inner_hi, np.array(rows), np.array(b),
                    np.zeros(len(b), np.int64), 1)


def _published():
    with open(ACAS / "PUBLISHED.csv", newline="") as fh:
        return {(r["onnx"], r["vnnlib"]): r["abcrown_result"] for r in csv.DictReader(fh)
                if r["benchmark"] == "acasxu"}


@pytest.mark.skipif(not (ACAS / "acasxu").is_dir(), reason="the shared benchmarks are absent")
@pytest.mark.parametrize("net,prop", ACAS_CASES)
def test_acas_xu_answers_never_contradict_the_published_ones(net, prop):
    model = onnx.load(str(ACAS / "acasxu" / net))
    proto = model.proto
    spec = _acas_spec(ACAS / "acasxu" / prop)
    models = bab.Models(lambda n: onnx.load(proto, [(n, 1, 1, 5)]), max_batch=128)

    def confirm(x):
        y = np.asarray(model.forward(np.asarray(x, np.float32).reshape(1, 1, 1, 5)),
                       np.float64).reshape(-1)
        inside = np.all(x >= spec.inner_lower) and np.all(x <= spec.inner_upper)
        met = np.all(y @ spec.a.T <= spec.b)
        return (np.asarray(x, np.float64), y) if inside and met else None

    result = bab.search(models, spec, confirm, batch=64, max_domains=4000)
    truth = _published()[(net, prop)]
    if result.status == "sat":
        assert confirm(result.counterexample[0]) is not None
    assert result.status in (truth, "unknown"), (result.status, truth, result.reason)
    if truth == "sat":
        assert result.status == "sat"  # the attack and the splitting find it
    # with a CROWN rule for every op of the network (the ONNX MatMul), these are proved too
    root = compute_bounds(models.get(1), spec.lower.reshape(1, 1, 1, 5),
                          spec.upper.reshape(1, 1, 1, 5), method="crown")
    if getattr(root, "interval_fallbacks", None) == []:
        assert result.status == truth


def _resumed(model, spec, intermediate, ticks_per_call, drop=False):
    """``search`` stopped by a clock every ``ticks_per_call`` readings and resumed from its
    open domains (``resume``) until it answers: (status, domains, calls). ``drop``: a planted
    wrong resume that loses half the open domains."""
    confirm = _confirm(model, spec)
    models = _models(model, spec.lower.size, intermediate=intermediate)
    queue, domains, calls = None, 0, 0
    while True:
        ticks = itertools.count()
        found = bab.search(models, spec, confirm, batch=8, timeout=float(ticks_per_call),
                           clock=lambda t=ticks: float(next(t)), alpha_steps=0, resume=queue,
                           attack_steps=0, progress=_no_runaway)
        domains += found.domains
        calls += 1
        if found.status != "timeout":
            return found.status, domains, calls
        queue = found.queue
        assert queue is not None and queue.size > 0
        if drop:
            queue.size //= 2


@pytest.mark.parametrize("intermediate", ["crown", "pairs"])
def test_a_resumed_search_keeps_the_verdicts_and_the_work(intermediate):
    # stopped every few clock readings and resumed from its open domains: the exact truth (no
    # attacks: a sat case's point comes from a domain centre), and on unsat cases exactly the
    # domains of the search that never stopped (the same order and splits)
    resumed = 0
    for _, model, spec, truth in CASES:
        status, domains, calls = _resumed(model, spec, intermediate, 8)
        assert status == truth
        if truth == "unsat":
            whole = bab.search(_models(model, spec.lower.size, intermediate=intermediate), spec,
                               _confirm(model, spec), batch=8, alpha_steps=0, attack_steps=0)
            assert whole.status == "unsat" and whole.domains == domains
        resumed += calls > 2
    assert resumed >= 3  # the clock stopped several of them more than once


def test_a_resume_that_loses_open_domains_is_caught():
    wrong = [truth for _, model, spec, truth in CASES
             if _resumed(model, spec, "pairs", 8, drop=True)[0] != truth]
    assert "sat" in wrong


def test_a_domain_budget_stops_a_search_that_resumes_to_the_same_work():
    # max_bounded stops the search like a timeout (open domains kept, BabResult.budget set);
    # resumed without a budget, it ends with the uninterrupted search's verdict and domains
    checked = 0
    for _, model, spec, truth in CASES:
        if truth != "unsat":
            continue
        confirm = _confirm(model, spec)
        models = _models(model, spec.lower.size, intermediate="pairs")
        whole = bab.search(models, spec, confirm, batch=8, alpha_steps=0, attack_steps=0)
        budget = whole.domains // 3
        if budget < 2:
            continue
        cut = bab.search(models, spec, confirm, batch=8, alpha_steps=0, attack_steps=0,
                         max_bounded=budget)
        assert cut.status == "timeout" and cut.budget and "budget" in cut.reason
        assert budget <= cut.domains < budget + 2 * 8 and cut.queue is not None
        rest = bab.search(models, spec, confirm, batch=8, alpha_steps=0, attack_steps=0,
                          resume=cut.queue)
        assert rest.status == "unsat" and not rest.budget
        assert cut.domains + rest.domains == whole.domains
        checked += 1
    assert checked >= 1
    _, model, spec, _ = CASES[0]
    with pytest.raises(bab.BabError, match="max_bounded"):
        bab.search(_models(model, spec.lower.size), spec, _confirm(model, spec), max_bounded=0)
