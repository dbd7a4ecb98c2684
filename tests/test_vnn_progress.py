"""What ``torchlean vnn`` reports about branch and bound's work: the running counts a progress
callback sees (domains bounded, proved, open), the domains each result carries, and the
benchmark summary's domains per second, in the library and in the command's table.

The counts are checked against each other on a real search (ACAS Xu ``1_1`` property 1, a
second of work): reports never go backwards, never claim more proved domains than bounded, and
a plain binary search that ends ``unsat`` has proved exactly its leaves, ``(domains + 1) / 2``.
"""

from __future__ import annotations

import os
import re

import pytest

from torchlean.bounds import bab
from torchlean.cli import vnn as vnn_cli
from torchlean.vnn import benchmark, vnnlib
from torchlean.vnn.instance import Network, verify_instance

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "vnncomp2021")
if not os.path.isdir(SHARED):
    SHARED = "/work/shared/vnncomp2021"
needs_shared = pytest.mark.skipif(not os.path.isdir(SHARED), reason="needs ../shared")

ACAS = os.path.join(SHARED, "acasxu")
NET, PROP = "ACASXU_run2a_1_1_batch_2000.onnx", "prop_1.vnnlib"


def test_shifted_progress_counts_what_came_before_as_it_was_then():
    before = bab.BabResult("timeout", domains=10, proved=4)
    got: list[dict] = []
    report = bab.shift_progress(got.append, before)
    before.domains, before.proved = 99, 99  # (read when shifted, not when reported)
    report({"domains": 3, "proved": 1, "open": 2, "seconds": 0.5})
    report({"domains": 5})
    assert got == [{"domains": 13, "proved": 5, "open": 2, "seconds": 0.5},
                   {"domains": 15, "proved": 4}]


@needs_shared
def test_a_plain_search_reports_running_counts_and_proves_its_leaves():
    net, prop = Network(os.path.join(ACAS, NET)), vnnlib.read(os.path.join(ACAS, PROP))
    reports: list[dict] = []
    found = bab.verify_network(net, prop, lookahead="off", progress=reports.append)
    assert found.status == "unsat" and found.domains > 1 and reports
    domains = [r["domains"] for r in reports]
    assert domains == sorted(domains) and domains[-1] <= found.domains
    assert all(0 <= r["proved"] <= r["domains"] and r["open"] >= 0 for r in reports)
    # every split makes two children, each proved or split in turn: the leaves are proved
    assert 2 * found.proved == found.domains + 1, (found.proved, found.domains)


@needs_shared
def test_an_instance_carries_its_domains_and_the_summary_their_rate():
    reports: list[dict] = []
    result = verify_instance(os.path.join(ACAS, NET), os.path.join(ACAS, PROP), None, "bab",
                             effort=0, progress=reports.append)
    assert result.status == "unsat"
    said = int(re.search(r"branch and bound: (\d+) domains", result.message).group(1))
    assert result.domains == said > 1 and result.as_dict()["domains"] == said
    assert reports and reports[-1]["domains"] <= said
    row = benchmark.Row(benchmark.Instance(NET, PROP, 116.0), result)
    assert row.as_dict()["domains"] == said
    summary = benchmark.summary([row, row])
    assert summary["domains"] == 2 * said
    assert summary["domains_per_second"] == pytest.approx(
        said / result.stages["bab"], rel=1e-3, abs=0.1)
    # no branch and bound, no rate (and no division by zero)
    quiet = benchmark.Row(row.instance, type(result)("unsat", 0.1, "crown", "float32"))
    assert benchmark.summary([quiet])["domains_per_second"] == 0.0


def test_the_status_line_redraws_at_most_every_interval(monkeypatch):
    shown: list[str] = []
    monkeypatch.setattr(vnn_cli, "REDRAW_S", 0.0)
    line = vnn_cli.status_line(shown.append)
    line({"domains": 1234, "proved": 5, "open": 6})
    line({"domains": 1300, "open": 7})
    assert shown == ["1,234 domains, 5 proved, 6 open", "1,300 domains, 0 proved, 7 open"]
    monkeypatch.setattr(vnn_cli, "REDRAW_S", 1e9)  # (no clock decides the test: never again)
    shown.clear()
    line = vnn_cli.status_line(shown.append)
    for k in range(5):
        line({"domains": k, "proved": 0, "open": 1})
    assert shown == ["0 domains, 0 proved, 1 open"]


@needs_shared
def test_the_benchmark_table_has_domains_and_their_rate(tmp_path, capsys):
    from torchlean.cli import main

    rows = tmp_path / "one.csv"
    rows.write_text(f"{NET},{PROP},116\n")
    out = tmp_path / "rows.csv"
    assert main(["vnn", "--instances", str(rows), "--dir", ACAS, "--effort", "0",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| total s | median s | domains | domains/s |" in printed
    line = next(t for t in printed.splitlines() if t.startswith("| acasxu | bab | 1 | 1 |"))
    domains, rate = line.strip("| ").split(" | ")[-2:]
    assert int(domains) > 1 and float(rate) > 0
    assert f",{domains}" in out.read_text().splitlines()[1]
