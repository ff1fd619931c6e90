# SPDX-License-Identifier: MIT
"""Aborts that reach verl's rollout servers (issue 44, docs/SERVERS.md
"verl").

verl 0.9.1's ``LLMServerClient.generate`` picks a server actor through its
load balancer (``_acquire_server``) and awaits
``server.generate.remote(...)``. Cancelling that await (what v05's driver
does to every sample it no longer needs: an early start's abort, a failed
batch, a closed run) does not cancel the Ray call, so the server went on
generating tokens nobody reads. The server actors' own abort methods do
not fit (the id verl sends is a fresh uuid per call, vLLM 0.32 keys its
requests by an internal id, and ``abort_request`` clears the prefix
cache after each abort). What does: ``ray.cancel`` on the call's
ObjectRef. For an async actor Ray cancels the actor's task, so the
server's ``generate`` is cancelled inside its engine call, and vLLM's
``AsyncLLM.generate`` (sglang's ``TokenizerManager`` likewise) aborts a
request whose generator is cancelled.

``cancel_on_abort(client)`` wraps one client instance: the handle its
``_acquire_server`` returns is replaced by one whose ``generate.remote``
returns an awaitable that, when cancelled, cancels the Ray call too.
verl's code is not copied or changed; a client without
``_acquire_server`` (another verl) is left as it is, and says so.
"""

import asyncio
import logging

__all__ = ["cancel_on_abort"]

log = logging.getLogger("v05.verl")


async def _call(ref):
    """Await a Ray call; cancelled, cancel it in the actor too."""
    try:
        return await ref
    except asyncio.CancelledError:
        import ray
        try:
            ray.cancel(ref)  # an async actor: its task is cancelled
        except Exception as e:  # a call already finished, a dead actor
            log.debug("v05: ray.cancel of a server call: %s", e)
        raise


class _Method:
    __slots__ = ("_m",)

    def __init__(self, method):
        self._m = method

    def remote(self, *args, **kwargs):
        return _call(self._m.remote(*args, **kwargs))


class _Server:
    """An actor handle whose generate calls are cancelled with their
    caller; everything else is the handle's."""

    __slots__ = ("_h",)

    def __init__(self, handle):
        self._h = handle

    @property
    def generate(self):
        return _Method(self._h.generate)

    def __getattr__(self, name):
        return getattr(self._h, name)


def cancel_on_abort(client) -> bool:
    """Make `client`'s (an LLMServerClient's) server calls end with the
    task that awaits them. True when it was wrapped now or before."""
    if getattr(client, "_v05_cancel_on_abort", False):
        return True
    acquire = getattr(client, "_acquire_server", None)
    if acquire is None:
        log.warning("v05: %s has no _acquire_server: aborted samples keep "
                    "generating in verl's servers", type(client).__name__)
        return False

    async def acquire_cancelling(*args, **kwargs):
        server_id, handle = await acquire(*args, **kwargs)
        return server_id, _Server(handle)

    client._acquire_server = acquire_cancelling
    client._v05_cancel_on_abort = True
    return True
