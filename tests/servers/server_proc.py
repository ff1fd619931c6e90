# SPDX-License-Identifier: MIT
"""An engine's HTTP server as a child process of a test: started on a free
port in a session of its own, ready when its health route answers 200
(polled, never slept on), stopped however the test ended (SIGTERM to its
process group, SIGKILL after a grace period), and checked afterwards: no
process of it left, no segment of the test's prefix left in /dev/shm
(the v05 reapers remove the segments of front ends that were killed)."""
import os
import signal
import socket
import subprocess
import time

import httpx
import psutil

SHM = "/dev/shm"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def segments(prefix: str):
    """v05's files in /dev/shm for segments named <prefix>-..."""
    return sorted(f for f in os.listdir(SHM)
                  if f.startswith(f"v05-{prefix}-"))


def poll(cond, timeout: float, what: str, every: float = 0.05):
    """Wait until cond() is true (it is polled; the interval only bounds
    the polling rate), or fail naming what was waited for."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for "
                                 f"{what}")
        time.sleep(every)


class Server:
    def __init__(self, argv, env, log_path, prefix):
        self.port = None
        self.prefix = prefix
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.pgid = self.proc.pid
        self.started = time.monotonic()
        self.ready_after = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def tail(self, n=60) -> str:
        with open(self.log_path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-n:]).decode(
                "utf-8", "replace")

    def wait_ready(self, timeout=900, path="/health"):
        def up():
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with "
                                     f"{self.proc.returncode}:\n{self.tail()}")
            try:
                return httpx.get(self.url + path, timeout=5).status_code == 200
            except httpx.HTTPError:
                return False
        poll(up, timeout, f"{self.url}{path}", every=0.5)
        self.ready_after = time.monotonic() - self.started
        return self

    def processes(self):
        """The server's processes still alive: its group's."""
        out = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(p.pid) == self.pgid and \
                        p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except (ProcessLookupError, psutil.Error):
                continue
        return out

    def stop(self, grace=60.0, sig=signal.SIGTERM, kept=False):
        """kept: the server keeps its segments when it ends
        ("keep_segment"): they are checked there and left."""
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        try:  # whatever is left of the group
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.proc.poll() is None:
            self.proc.wait(30)
        self.log.close()
        poll(lambda: not self.processes(), 60, "the server's processes to "
             "end")
        if kept:
            assert segments(self.prefix), \
                f"no segment v05-{self.prefix}-* was kept"
            return
        # The reapers (sessions of their own) remove the segments of front
        # ends that did not close them.
        poll(lambda: not segments(self.prefix), 60,
             f"the segments v05-{self.prefix}-* to be removed")
