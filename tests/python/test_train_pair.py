# SPDX-License-Identifier: MIT
"""bench/train/pair.py: a mode of one committed summary against modes of
another, paired by seed. Against the same page it must give that page's
own paired analysis (report.py's, analysis.compare); summaries of other
regimes are refused."""
import json
import os
import subprocess
import sys

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
