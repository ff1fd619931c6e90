# SPDX-License-Identifier: MIT
"""bench/train/pair.py: a mode of one committed summary against modes of
another, paired by seed. Against the same page it must give that page's
own paired analysis (report.py's, analysis.compare); summaries of other
regimes are refused."""
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PAIR = os.path.join(ROOT, "bench", "train", "pair.py")
RES = os.path.join(ROOT, "bench", "results", "train")


def run(*args):
    return subprocess.run([sys.executable, PAIR, *args], capture_output=True,
                          text=True, timeout=120)


def test_pair_on_one_page_is_the_pages_paired_analysis():
    page = os.path.join(RES, "NOISYPRIOR.json")
    r = run(page, "v05-pg-s750", page, "default")
    assert r.returncode == 0, r.stderr
    row = [x for x in r.stdout.splitlines() if x.startswith("| default |")]
    assert len(row) == 1, r.stdout
    # The page's row for v05-pg-s750 against the default (AUC column).
    with open(os.path.join(ROOT, "bench", "train", "NOISYPRIOR.md")) as f:
        page_row = [x for x in f if x.startswith("| v05-pg-s750 | 10 |")]
    assert len(page_row) == 1
    auc = page_row[0].split("|")[3].strip()
    assert row[0].split("|")[3].strip() == auc


def test_pair_refuses_other_regimes(tmp_path):
    r = run(os.path.join(RES, "NOISYPRIOR.json"), "v05-pg-s750",
            os.path.join(RES, "SPARSE.json"), "default")
    assert r.returncode != 0
    assert "regime differs" in r.stderr
    d = json.load(open(os.path.join(RES, "NOISYPRIOR.json")))
    d["summary"]["default"]["seeds"] = d["summary"]["default"]["seeds"][:-1]
    other = tmp_path / "s.json"
    other.write_text(json.dumps(d))
    r = run(os.path.join(RES, "NOISYPRIOR.json"), "v05-pg-s750", str(other),
            "default")
    assert r.returncode != 0 and "ran other seeds" in r.stderr


def summary(regime, modes):
    """A summary of made-up curves: 10 steps of 100 rollouts, mode ->
    {seed: curve}."""
    return {"regime": regime, "steps": 10, "budget_per_step": 100,
            "lr": 0.002, "heldout": 360, "eval_rollouts": 250,
            "commit": "test",
            "summary": {m: {"seeds": sorted(c), "curves": [c[s] for s in sorted(c)]}
                        for m, c in modes.items()}}


SEEDS = range(1000, 1010)


def line(points):
    return [[r, a] for r, a in points]


def write(tmp_path, name, d):
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return str(p)


def test_pair_rollouts_to_grpo16s_final(tmp_path):
    # grpo-16 ends at 0.4 + 0.01 i in seed 1000 + i: the target T.
    T = {s: 0.4 + 0.01 * (s - 1000) for s in SEEDS}
    grpo = {s: line([(0, 0.2), (1000, T[s])]) for s in SEEDS}
    # The candidate reaches T at 200 + 10 i rollouts (linear from 0.2).
    cand_at = {s: 200 + 10 * (s - 1000) for s in SEEDS}
    cand = {s: line([(0, 0.2), (cand_at[s], T[s]), (1000, 0.6)]) for s in SEEDS}
    # fixed-1 at 400 + 40 i; fixed-2 never reaches T in seed 1009 (the
    # budget counts) and at 700 elsewhere.
    f1_at = {s: 400 + 40 * (s - 1000) for s in SEEDS}
    fixed1 = {s: line([(0, 0.2), (f1_at[s], T[s]), (1000, 0.5)]) for s in SEEDS}
    fixed2 = {s: line([(0, 0.2), (700, T[s]), (1000, T[s] + 0.01)])
              for s in SEEDS}
    fixed2[1009] = line([(0, 0.2), (1000, T[1009] - 0.01)])
    a = write(tmp_path, "a.json", summary("sparse", {"v05-pg-s750": cand}))
    b = write(tmp_path, "b.json", summary("sparse", {"grpo-16": grpo,
                                                      "fixed-1": fixed1}))
    c = write(tmp_path, "c.json", summary("sparse", {"fixed-2": fixed2}))
    md = tmp_path / "T.md"
    r = run("--target", b, "--md", str(md), a, "v05-pg-s750", b,
            "grpo-16,fixed-1", c, "fixed-2")
    assert r.returncode == 0, r.stderr
    rows = {x.split("|")[1].strip(): [y.strip() for y in x.split("|")[2:-1]]
            for x in r.stdout.splitlines() if x.startswith("| ") and
            not x.startswith("| mode")}
    ca = np.array([cand_at[s] for s in SEEDS], dtype=float)
    # grpo-16 reaches its own final at the budget, and that counts.
    for m, at, share in (("grpo-16", np.full(10, 1000.0), "100%"),
                         ("fixed-1", np.array([f1_at[s] for s in SEEDS], float), "100%"),
                         ("fixed-2", np.array([700.0] * 9 + [1000.0]), "90%")):
        cells = rows[m]
        # the columns: seeds, AUC, p, ahead, final, reached, rollouts,
        # ratio (geometric mean), ratio of means, diff, p, faster
        assert cells[5] == share, (m, cells)
        assert cells[6] == f"{at.mean():.0f}", (m, cells)
        geo = np.exp(np.mean(np.log(ca / at)))
        assert cells[7].startswith(f"{geo:.2f} ["), (m, cells)
        assert cells[8] == f"{ca.mean() / at.mean():.2f}", (m, cells)
        assert cells[9].startswith(f"{(ca - at).mean():+.0f} ["), (m, cells)
    # The best fixed k is fixed-1 here (the candidate's ratio is higher).
    bar = [x for x in r.stdout.splitlines() if "best fixed k" in x]
    assert len(bar) == 1 and "(fixed-1)" in bar[0], r.stdout
    assert "the bar 0.85: met, interval included" in bar[0]
    g = [x for x in r.stdout.splitlines() if "/ grpo-16 (grpo-16)" in x]
    assert len(g) == 1 and "the bar 0.5: met, interval included" in g[0]
    text = md.read_text()
    assert text.startswith("## Regime sparse: v05-pg-s750 against the others")
    assert "0.400, 0.410" in text  # the per-seed targets
    r = run("--target", b, "--md", str(md), "--title", "Rollouts to T", a,
            "v05-pg-s750", b, "fixed-1")
    assert r.returncode == 0, r.stderr
    assert md.read_text().startswith("# Rollouts to T\n\n## Regime sparse")
    r = run("--target", b, "--md", str(md), "--append", a, "v05-pg-s750", c,
            "fixed-2")
    text = md.read_text()
    assert text.count("## Regime sparse") == 2 and "| fixed-2 | 10 |" in text


def test_pair_target_refuses_missing_seeds_and_regimes(tmp_path):
    cur = {s: line([(0, 0.2), (1000, 0.4)]) for s in SEEDS}
    a = write(tmp_path, "a.json", summary("today", {"v05-pg-s750": cur}))
    short = write(tmp_path, "t.json", summary("today", {
        "grpo-16": {s: cur[s] for s in list(SEEDS)[:-1]}, "fixed-1": cur}))
    r = run("--target", short, a, "v05-pg-s750", short, "fixed-1")
    assert r.returncode != 0 and "ran no seed [1009]" in r.stderr
    nog = write(tmp_path, "n.json", summary("today", {"fixed-1": cur}))
    r = run("--target", nog, a, "v05-pg-s750", nog, "fixed-1")
    assert r.returncode != 0 and "has no grpo-16" in r.stderr
    other = write(tmp_path, "o.json", summary("sparse", {"grpo-16": cur}))
    r = run("--target", other, a, "v05-pg-s750", nog, "fixed-1")
    assert r.returncode != 0 and "regime differs" in r.stderr


def test_pair_common_seeds_pairs_an_unfinished_set(tmp_path):
    T = {s: 0.4 for s in SEEDS}
    cand = {s: line([(0, 0.2), (100 + 10 * (s - 1000), 0.4), (1000, 0.6)])
            for s in SEEDS}
    # fixed-1 ran seeds 1000-1005 only; the candidate's 1006-1009 are
    # slower, so pairing on all its seeds would give another answer.
    for s in range(1006, 1010):
        cand[s] = line([(0, 0.2), (900, 0.4), (1000, 0.41)])
    f1 = {s: line([(0, 0.2), (400, 0.4), (1000, 0.5)]) for s in range(1000, 1006)}
    grpo = {s: line([(0, 0.2), (1000, T[s])]) for s in SEEDS}
    a = write(tmp_path, "a.json", summary("today", {"v05-pg-s750": cand}))
    b = write(tmp_path, "b.json", summary("today", {"grpo-16": grpo,
                                                     "fixed-1": f1}))
    r = run("--target", b, a, "v05-pg-s750", b, "fixed-1")
    assert r.returncode != 0 and "ran other seeds" in r.stderr
    r = run("--target", b, "--common-seeds", a, "v05-pg-s750", b, "fixed-1")
    assert r.returncode == 0, r.stderr
    row = [x for x in r.stdout.splitlines() if x.startswith("| fixed-1 |")]
    cells = [y.strip() for y in row[0].split("|")[2:-1]]
    assert cells[0] == "6 (< 10)"
    ca = np.array([100 + 10 * i for i in range(6)], dtype=float)
    assert cells[6] == "400"
    assert cells[8] == f"{ca.mean() / 400:.2f}"
    assert cells[11] == "6/6"
    # The best fixed k is the one the ratio is highest against, not the
    # one with the fewest rollouts over other seeds: fixed-2 (500 in
    # every seed; ratio about 0.55) over fixed-1 (400 on the candidate's
    # fast seeds; ratio about 0.31).
    f2 = {s: line([(0, 0.2), (500, 0.4), (1000, 0.5)]) for s in SEEDS}
    c = write(tmp_path, "c.json", summary("today", {"fixed-2": f2}))
    r = run("--target", b, "--common-seeds", a, "v05-pg-s750", b, "fixed-1",
            c, "fixed-2")
    assert r.returncode == 0, r.stderr
    bar = [x for x in r.stdout.splitlines() if "best fixed k" in x]
    assert len(bar) == 1 and "(fixed-2)" in bar[0], r.stdout


def test_pair_names_seeds_whose_target_is_at_the_start(tmp_path):
    # grpo-16 ends below its start in seeds 1000 and 1001: T is reached
    # at 0 by every mode there; elsewhere the candidate takes 100, fixed-1
    # 400 (ratio 0.25 on those 8 seeds, 1 on the other two).
    grpo = {s: line([(0, 0.2), (1000, 0.1 if s < 1002 else 0.4)]) for s in SEEDS}
    cand = {s: line([(0, 0.2), (100, 0.4), (1000, 0.6)]) for s in SEEDS}
    f1 = {s: line([(0, 0.2), (400, 0.4), (1000, 0.5)]) for s in SEEDS}
    a = write(tmp_path, "a.json", summary("today", {"v05-pg-s750": cand}))
    b = write(tmp_path, "b.json", summary("today", {"grpo-16": grpo,
                                                     "fixed-1": f1}))
    r = run("--target", b, a, "v05-pg-s750", b, "fixed-1")
    assert r.returncode == 0, r.stderr
    assert "at or below the start accuracy in seed(s) 1000, 1001" in r.stdout
    bar = [x for x in r.stdout.splitlines() if "best fixed k" in x][0]
    geo = np.exp(np.log(0.25) * 8 / 10)
    assert f": {geo:.2f} [" in bar
    assert "on the 8 seeds whose T is above the start accuracy: 0.25" in bar
