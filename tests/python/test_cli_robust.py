# SPDX-License-Identifier: MIT
"""v05ctl on hostile input: a FIFO as the journal, a short file that is not
one, malformed names, repeated options; and names with a NUL in Python."""
import os
import subprocess

import pytest

import v05


def run(v05ctl, *args, timeout=10):
    return subprocess.run([v05ctl, *args], capture_output=True, text=True,
                          timeout=timeout)


def test_journal_on_fifo_does_not_hang(v05ctl, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = run(v05ctl, "journal", str(fifo), timeout=5)
    assert r.returncode == 1
    assert "not a regular file" in r.stderr


def test_short_non_journal_is_not_a_journal(v05ctl, tmp_path):
    f = tmp_path / "notes.txt"
    f.write_bytes(b"hello world\n")
    r = run(v05ctl, "journal", str(f))
    assert r.returncode == 1, r.stderr  # not 3 ("torn")
    assert "not a v05 journal" in r.stderr


@pytest.mark.parametrize("cmd", [["stat"], ["top", "-n", "1"], ["reclaim"]])
@pytest.mark.parametrize("name", ["../x", "", "a" * 300, ".hidden", "a b"])
def test_malformed_names_exit_2(v05ctl, cmd, name):
    r = run(v05ctl, *cmd, name)
    assert r.returncode == 2, (cmd, name, r.stderr)
    assert "segment name" in r.stderr


@pytest.mark.parametrize("args", [
    ["stat", "--json", "--json", "x"],
    ["top", "-n", "1", "-n", "2", "x"],
    ["top", "--delay=1", "--delay", "2", "x"],
    ["journal", "--summary", "--summary", "f"],
    ["estimate", "--prior", "0.1", "--prior", "0.2", "--rewards", "1"],
])
def test_repeated_options_rejected(v05ctl, args):
    r = run(v05ctl, *args)
    assert r.returncode == 2
    assert "given twice" in r.stderr


def test_negative_numbers_are_not_options(v05ctl):
    r = run(v05ctl, "estimate", "--prior", "-0.5", "--rewards", "-1,-1")
    assert r.returncode == 0, r.stderr


def test_names_with_nul_refused(segname):
    with pytest.raises(ValueError):
        v05.Plugin.create(segname + "\0other")
    with pytest.raises(ValueError):
        v05.RewardWriter.attach(segname + "\0other")
    with pytest.raises(ValueError):
        v05.Reader.open(segname + "\0other")
    with pytest.raises(ValueError):
        v05.Plugin.create(segname, journal="/tmp/j\0x")
    assert not os.path.exists(f"/dev/shm/v05-{segname}")
