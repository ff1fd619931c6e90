# SPDX-License-Identifier: MIT
"""What the demos share: the modes they compare and the table they print."""

__all__ = ["MODES", "format_table", "with_schedule", "schedule_text"]

# mode -> (label, plugin parameters): the paper's comparison.
MODES = {
    # The paper's rule on the paper's schedule; v05-eb on the library's
    # default (stream: no barrier). --schedule overrides both.
    "v05": ("v05 (OSLA)", dict(mode="v05", k_init=4, k_step=2, k_max=16,
                               schedule="rounds")),
    "v05-eb": ("v05-eb (no barrier)", dict(mode="v05-eb", k_init=4,
                                           k_step=2, k_max=16)),
    "v05-fixed": ("v05-fixed k=4", dict(mode="v05-fixed", k_init=4, k_max=4)),
    "grpo": ("grpo G=16", dict(mode="grpo", k_init=16, k_max=16)),
    "dapo": ("dapo G=16", dict(mode="dapo", k_init=16, k_max=16)),
    # The library's default, for the gradient rather than the baseline:
    # its MSE is not what it minimises (docs/RULES.md).
    "v05-pg": ("v05-pg (the default)", dict(mode="v05-pg")),
}


def with_schedule(params, schedule):
    """A mode's plugin parameters, with --schedule (if given) over its own."""
    out = dict(params)
    if schedule:
        out["schedule"] = schedule
    return out


def schedule_text(schedule):
    return f"schedule {schedule}" if schedule else \
        "schedules: rounds for v05 (the paper's), stream for v05-eb (no barrier)"


def format_table(head, rows):
    """Columns padded to their widest cell; the first left-aligned."""
    width = [max(len(h), *(len(row[i]) for row in rows))
             for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                     for i, (h, w) in enumerate(zip(head, width)))]
    for row in rows:
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(row, width))))
    return "\n".join(out)
