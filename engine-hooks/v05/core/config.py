# SPDX-License-Identifier: MIT
"""A plugin's configuration from keyword arguments: each one checked, the
rest the library's defaults (struct v05_config)."""

import ctypes
from typing import List, Optional, Sequence, Union

from . import _checks, _lib
from ._lib import lib
from .names import (BROKER_ALLOW_MAX, CONFIG_ABORT_RECORDS,
                    CONFIG_BROKER_OVERFLOW_IDS,
                    CONFIG_EXTERNAL_HALT, CONFIG_PRODUCER_BROKER,
                    CONFIG_WAIT_THREAD, MODES, SCHEDULES, SIGMAS)

__all__ = ["make_config"]


def _ids(what: str, ids, lookup) -> List[int]:
    """A broker allow-list: uids or gids as ints or names (resolved here
    with pwd / grp, so a typo fails now, not as a refused worker later)."""
    if isinstance(ids, (str, bytes, int)):
        raise TypeError(f"{what} must be a list of ids or names, "
                        f"not a single {type(ids).__name__}")
    out = []
    for x in ids:
        if isinstance(x, str):
            try:
                x = lookup(x)
            except KeyError:
                raise ValueError(f"{what}: no such name {x!r}") from None
        out.append(_checks.u32(what, x, 0, _checks.U32_MAX - 1))
    if len(out) > BROKER_ALLOW_MAX:
        raise ValueError(f"{what}: {len(out)} entries, at most "
                         f"{BROKER_ALLOW_MAX}")
    return out


def _share(name: str, value) -> float:
    """A number in [0, 1] (a threshold on a success rate)."""
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise TypeError(f"{name} is {value!r}, not a number in [0, 1]")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} is {value!r}, not a number in [0, 1]") \
            from None
    if not 0.0 <= f <= 1.0:  # false for NaN too
        raise ValueError(f"{name} is {value!r}, not a number in [0, 1]")
    return f


def _uid_of_name(name: str) -> int:
    import pwd
    return pwd.getpwnam(name).pw_uid


def _gid_of_name(name: str) -> int:
    import grp
    return grp.getgrnam(name).gr_gid


def _overflow(kind: str) -> set:
    """The kernel's overflow uid or gid (and 65534, its usual value): what
    an unmapped user of another user namespace looks like."""
    ids = {65534}
    try:
        with open(f"/proc/sys/kernel/overflow{kind}") as f:
            ids.add(int(f.read()))
    except (OSError, ValueError):
        pass
    return ids


def _broker_lists(name: str, producer_broker: bool, allow_uids, allow_gids,
                  overflow_ids: bool):
    """The broker's allow-lists (uids, gids), checked against each other
    and the broker's settings (make_config's text)."""
    uids = _ids("broker_allow_uids", allow_uids, _uid_of_name)
    gids = _ids("broker_allow_gids", allow_gids, _gid_of_name)
    if producer_broker and not uids and not gids:
        raise ValueError(
            f"create {name}: producer_broker=True needs broker_allow_uids "
            "or broker_allow_gids: the broker hands lanes only to the "
            "users you name (reward workers of another user; your own "
            "uid is always admitted)")
    if (uids or gids) and not producer_broker:
        raise ValueError(
            f"create {name}: broker_allow_uids / broker_allow_gids "
            "without producer_broker=True: no broker would use them")
    if overflow_ids and not producer_broker:
        raise ValueError(f"create {name}: broker_overflow_ids=True without "
                         "producer_broker=True: no broker would use it")
    if not overflow_ids:
        for field, ids, ovf in (("broker_allow_uids", uids, _overflow("uid")),
                                ("broker_allow_gids", gids, _overflow("gid"))):
            for x in ids:
                if x in ovf:
                    raise ValueError(
                        f"create {name}: {field} lists {x}, the kernel's "
                        "overflow id: every user of another user namespace "
                        "that this one does not map looks like it; list it "
                        "only with broker_overflow_ids=True")
    return uids, gids


def _set_pg_params(c, pg: Optional[dict]) -> None:
    """Mode v05-pg's parameters into config c (make_config's text)."""
    if not pg:
        return
    unknown = set(pg) - {"between", "first", "skip"}
    if unknown:
        raise ValueError(f"pg: unknown keys {sorted(unknown)}; it takes "
                         "between, first, skip")
    if "between" in pg:
        f = float(pg["between"])
        if not 0.0 <= f <= 1000.0:
            raise ValueError(f"pg between {pg['between']!r} is not in "
                             "[0, 1000]")
        c.pg_between = f
    if "first" in pg:
        sizes = [_checks.u32("pg first", n, 1, 31) for n in pg["first"]]
        if not sizes:
            raise ValueError("pg first: give at least one first-wave size")
        c.pg_first = sum(1 << n for n in set(sizes))
    if "skip" in pg:
        f = float(pg["skip"])
        if not 0.0 <= f <= 1.0:
            raise ValueError(f"pg skip {pg['skip']!r} is not a share in [0, 1]")
        c.pg_skip = round(f * 1000)


def _first_waves(eb_first) -> int:
    """eb_first (sizes of v05-eb's first wave, e.g. (2, 4); () for k_init
    always) as the config's mask, bit k for k samples."""
    if isinstance(eb_first, (str, bytes, int)):
        raise TypeError(f"eb_first {eb_first!r} is not a list of first-wave "
                        "sizes, e.g. (2, 4)")
    mask = 0
    for k in eb_first:
        mask |= 1 << _checks.u32("eb_first", k, 1, 31)
    return mask


def _set_rule_params(c, eb_window, eb_cold, eb_early, eb_first, pc_lower,
                     pc_upper, ebpo_window) -> None:
    """The published rules' parameters into config c (make_config's
    text), each checked."""
    u32 = _checks.u32
    if eb_first is not None:
        c.eb_first = _first_waves(eb_first)
    if eb_window is not None:
        c.eb_window = u32("eb_window", eb_window)
    if eb_cold is not None:
        c.eb_cold = u32("eb_cold", eb_cold, 1)
    if eb_early is not None:
        f = float(eb_early)
        if not 0.0 <= f <= 1.0:
            raise ValueError(f"eb_early {eb_early!r} is not a probability "
                             "in [0, 1]")
        # 0 is "off": the smallest threshold is 1 per mille.
        c.eb_early = max(1, round(f * 1000)) if f > 0 else 0
    for field, value in (("pc_lower", pc_lower), ("pc_upper", pc_upper)):
        if value is not None:
            setattr(c, field, _share(field, value))
    if ebpo_window is not None:
        c.ebpo_window = u32("ebpo_window", ebpo_window)


def make_config(name: str, *, cost: Optional[float] = None,
                k_init: Optional[int] = None, k_step: Optional[int] = None,
                k_max: Optional[int] = None, keep_n: Optional[int] = None,
                halt_fraction: Optional[float] = None,
                pad_multiple: Optional[int] = None, mode: Optional[str] = None,
                schedule: Optional[str] = None,
                max_prompts: Optional[int] = None,
                max_producers: Optional[int] = None,
                lane_capacity: Optional[int] = None,
                max_batches: Optional[int] = None,
                stream_deadline_us: Optional[int] = None,
                journal: Optional[str] = None, journal_sync: bool = False,
                file_mode: Optional[int] = None, wait: str = "auto",
                external_halt: bool = False, sigma: Optional[str] = None,
                paper: bool = False,
                producer_broker: bool = False,
                broker_allow_uids: Sequence[Union[int, str]] = (),
                broker_allow_gids: Sequence[Union[int, str]] = (),
                broker_overflow_ids: bool = False,
                lane_cut_records: Optional[int] = None,
                lane_cut_fraction: Optional[float] = None,
                eb_window: Optional[int] = None,
                eb_cold: Optional[int] = None,
                eb_early: Optional[float] = None,
                eb_first: Optional[Sequence[int]] = None,
                pc_lower: Optional[float] = None,
                pc_upper: Optional[float] = None,
                ebpo_window: Optional[int] = None,
                pg: Optional[dict] = None,
                abort_records: bool = False) -> _lib.Config:
    """The v05_config for Plugin.create(name, ...). Parameters as in
    include/v05/plugin.h (struct v05_config); every one is checked.
    A parameter left at None keeps the library's default
    (v05_config_default: mode "v05-pg" with its preset, sigma "paper",
    k 2/2/16, pad_multiple 1, ...); a mode given
    brings its own settings (v05_config_mode: "v05", "v05-fixed",
    "grpo", "dapo", "v05-eb" the library's k 4/2/16, sigma "rms",
    pad_multiple 32, halt_fraction 0.25; the others their preset);
    paper=True starts from v05_config_paper instead (mode "v05", sigma
    "paper", halt_fraction 0.25, rounds: the paper's exact behaviour; with
    another mode, its settings but the paper's sigma and rounds), and
    explicit parameters still win. producer_broker=True lets reward workers of
    other users in (RewardWriter.attach(..., any_uid=True)) through a
    broker thread that hands each its own lane only, and only to the
    users named: broker_allow_uids (uids or user names) and
    broker_allow_gids (gids or group names, matched against a worker's
    effective gid and its supplementary groups), at least one entry in
    all, at most BROKER_ALLOW_MAX each; the plugin's own uid is always
    admitted. The kernel's overflow uid and gid (65534: what every user of
    another user namespace this one does not map looks like) are refused,
    and may be listed only with broker_overflow_ids=True (then they are
    ids like any other). file_mode may let others read the segment, never
    write it. lane_cut_records and lane_cut_fraction set when a producer
    whose records are mostly rejected is cut off (at least that many
    records of its claim, more than that fraction rejected; defaults
    4 x max_prompts x k_max records, at least 4096, and 0.9;
    fraction 1.0 never cuts; docs/SHM.md, "Cutting a lane off").
    eb_window and eb_cold (mode v05-eb, schedule "stream", the default):
    the running fit's forgetting window and cold start, in first waves
    (defaults 512 and 64; eb_window 0 forgets nothing; docs/STATISTICS.md,
    "v05-eb without a barrier"). eb_early (a probability in [0, 1], 0 =
    off, the default): early start, k_step more samples with the first
    wave of a prompt whose chance of needing more is at least that; those
    not needed after all come back as "abort" decisions. eb_first (mode
    v05-eb): the sizes a prompt's first wave is chosen from once the fit
    is warm, the one of least expected final risk (default (2, 4); ()
    keeps k_init always); cost left at None is the mode's default
    (v05-eb's V05_EB_DEFAULT_COST, the others' V05_DEFAULT_COST).
    mode "reinforce-ada" / "reinforce-ada-pos" / "knapsack-prior" /
    "knapsack" / "greso" / "ebpo" / "pilot-commit": the published
    allocation rules (docs/RULES.md), each with its own defaults
    (v05_config_mode); keep_n is Reinforce-Ada's n, the samples of a
    group trained on (default k_init / 2). pc_lower and pc_upper
    (pilot-commit): a pilot success rate in [pc_lower, 1 - pc_upper]
    earns the commit (defaults 0.125 and 0.25, its authors'); k_init is
    the pilot, k_step the commit, k_max their sum. ebpo_window (ebpo):
    its running statistics forget with a window of that many groups
    (default 0: never, the paper's Welford). pg (mode "v05-pg"): a dict
    of between (the between-prompt variance relative to a sample's,
    default 0.13), first (the first-wave sizes it may choose, default
    (1, 2, 4)), skip (a prompt whose expected signal sqrt(4 p (1 - p))
    is below this share of the mean over the prompts submitted is skipped:
    it comes back as a "drop" with k = 0; default 0.75, 0 never skips).
    abort_records=True: a
    producer may abort a prompt it names (RewardWriter.abort), which
    comes back from poll() as a "cancel" decision (docs/SHM.md, "Abort
    records"); off by default, when such a record is refused."""
    c = _lib.Config()
    _lib.check(lib.v05_config_init(ctypes.byref(c), ctypes.sizeof(c),
                              _lib.const("V05_CONFIG_INIT_PAPER") if paper
                              else 0), "config")
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {sorted(MODES)}")
    if sigma is not None and sigma not in SIGMAS:
        raise ValueError(f"sigma {sigma!r} is not one of {sorted(SIGMAS)}")
    if schedule is not None and schedule not in SCHEDULES:
        raise ValueError(f"schedule {schedule!r} is not one of "
                         f"{sorted(SCHEDULES)}")
    if wait not in ("auto", "thread"):
        raise ValueError("wait must be 'auto' or 'thread'")
    uids, gids = _broker_lists(name, producer_broker, broker_allow_uids,
                               broker_allow_gids, broker_overflow_ids)
    if mode is not None:
        # The mode's own defaults first (v05_config_mode: reinforce-ada's
        # rounds of 8 up to 32, no padding; knapsack-prior's budget of 8
        # up to 64); explicit parameters below still win.
        _lib.check(lib.v05_config_mode(ctypes.byref(c), MODES[mode]),
                   f"create {name}: mode {mode}")
        if paper:
            # v05_config_mode sets every mode's settings; paper=True
            # keeps the paper's normaliser and rounds over them.
            c.params.sigma = SIGMAS["paper"]
            c.schedule = SCHEDULES["rounds"]
    u32 = _checks.u32
    if cost is not None:
        c.params.cost = cost
    if k_init is not None:
        c.params.k_init = u32("k_init", k_init, 1)
    if k_step is not None:
        c.params.k_step = u32("k_step", k_step, 1)
    if k_max is not None:
        c.params.k_max = u32("k_max", k_max, 1)
    if keep_n is not None:
        c.params.keep_n = u32("keep_n", keep_n)
    if sigma is not None:
        c.params.sigma = SIGMAS[sigma]
    if halt_fraction is not None:
        c.halt_fraction = halt_fraction
    if pad_multiple is not None:
        c.pad_multiple = u32("pad_multiple", pad_multiple, 1)
    if schedule is not None:
        c.schedule = SCHEDULES[schedule]
    elif external_halt:
        # The halt is resolved at round barriers: the rounds schedule.
        c.schedule = SCHEDULES["rounds"]
    if stream_deadline_us is not None:
        c.stream_deadline_us = u32("stream_deadline_us",
                                   stream_deadline_us)
    for field, value in (("max_prompts", max_prompts),
                         ("max_producers", max_producers),
                         ("lane_capacity", lane_capacity),
                         ("max_batches", max_batches)):
        if value is not None:
            setattr(c, field, u32(field, value, 1))
    if file_mode is not None:
        c.file_mode = u32("file_mode", file_mode, 0, 0o777)
    for i, x in enumerate(uids):
        c.broker_uids[i] = x
    for i, x in enumerate(gids):
        c.broker_gids[i] = x
    c.n_broker_uids, c.n_broker_gids = len(uids), len(gids)
    if lane_cut_records is not None:
        c.lane_cut_records = u32("lane_cut_records", lane_cut_records, 1)
    if lane_cut_fraction is not None:
        f = float(lane_cut_fraction)
        if not 0.0 <= f <= 1.0:
            raise ValueError(f"lane_cut_fraction {lane_cut_fraction!r} "
                             "is not in [0, 1]")
        # 0 in C is "the default": the smallest fraction is 1 per mille.
        c.lane_cut_permille = max(1, round(f * 1000))
    _set_rule_params(c, eb_window, eb_cold, eb_early, eb_first, pc_lower,
                     pc_upper, ebpo_window)
    _set_pg_params(c, pg)
    c.flags |= ((CONFIG_WAIT_THREAD if wait == "thread" else 0) |
                (CONFIG_EXTERNAL_HALT if external_halt else 0) |
                (CONFIG_PRODUCER_BROKER if producer_broker else 0) |
                (CONFIG_BROKER_OVERFLOW_IDS if broker_overflow_ids else 0) |
                (CONFIG_ABORT_RECORDS if abort_records else 0))
    if journal_sync:
        c.journal_sync = _lib.const("V05_JOURNAL_SYNC_BATCH")
    c.journal_path = _checks.cstr("journal", journal) if journal else None
    return c
